import pytest

from ai_contrib.core.messages import is_marker, make_message, normalise_message


def test_make_message_has_unique_ids_and_fields():
    a = make_message("user", "hello", name="Bob")
    b = make_message("user", "hello", name="Bob")
    assert a["id"] != b["id"]
    assert a["role"] == "user" and a["name"] == "Bob" and a["content"] == "hello"
    assert a["timestamp"]


def test_make_message_rejects_bad_role():
    with pytest.raises(ValueError):
        make_message("narrator", "x")


def test_old_style_entry_is_normalised_without_losing_content():
    old = {"role": "assistant", "content": "Welcome!"}
    msg = normalise_message(old)
    assert msg is old and msg["id"] and msg["content"] == "Welcome!" and msg["role"] == "assistant"
    assert not is_marker(msg)
    assert is_marker({"role": "system", "content": "[CONTEXT SUMMARY]\nx"})
