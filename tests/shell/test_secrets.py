"""
A key never leaves the LLM client: a server echoing the Authorization header, in an error or in a
200 answer, reaches no exception, log line, admin screen or stored summary with the key in it.
"""

from contextlib import ExitStack
from unittest import mock

import pytest
from evennia.utils import logger

from ai_contrib.commands import CmdCompact
from ai_contrib.core.redact import redact
from ai_contrib.llm.client import LLMError, get_client

from tests.support.llm_double import http_error
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for, wait_until

KEY = "test-key"  # the key NPCTestCase configures
ECHO = f"I saw your headers: Authorization: Bearer {KEY}; also sk-live0123456789abcdef."


@pytest.mark.parametrize("text", [
    f"Bearer {KEY}", f'{{"Authorization": "Bearer {KEY}"}}', f"authorization={KEY}",
    "key sk-proj-ABCDEFGH12345678", f"the key is {KEY}",
])
def test_redact_masks_every_form(text):
    out = redact(text, [KEY])
    assert KEY not in out and "sk-proj" not in out and "***" in out


def test_the_login_of_a_url_is_masked():
    assert redact("LLM server at http://admin:hunter2@10.0.0.5:8080/v1 answered") == (
        "LLM server at http://***@10.0.0.5:8080/v1 answered")
    assert redact("https://sk_user@api.example.com/v1") == "https://***@api.example.com/v1"
    # controls: a URL without a login and an e-mail address are left alone
    assert redact("http://10.0.0.5:8080/v1") == "http://10.0.0.5:8080/v1"
    assert redact("write to admin@example.com") == "write to admin@example.com"


def test_the_server_log_names_the_llm_servers_url_without_its_login(settings):
    from ai_contrib import startup

    logged = []
    settings.AI_LLM_BASE_URL = "http://admin:hunter2@127.0.0.1:9/v1"
    with ExitStack() as stack, mock.patch.object(startup, "open_memory_store"), \
            mock.patch.object(startup, "load_lore"):
        for patch in watch_logs(logged):
            stack.enter_context(patch)
        startup.at_server_start()
    assert any("http://***@127.0.0.1:9/v1" in line for line in logged), logged
    assert not any("hunter2" in line for line in logged)


def watch_logs(logged):
    """Patches of every logging function of ``evennia.utils.logger`` (``log_info``, ``log_err``,
    ``log_trace``, ``log_file``, ... and their aliases), each appending the text it was given to
    ``logged``: a key may reach the log through any of them. Start them with ``ExitStack``."""
    names = sorted(name for name in dir(logger) if name.startswith("log_")
                   and callable(getattr(logger, name)) and name != "log_file_exists")
    assert {"log_info", "log_warn", "log_err", "log_trace"} <= set(names), names
    return [mock.patch.object(logger, name, side_effect=lambda *a, **k: logged.append(
        " ".join(map(str, a)))) for name in names]


class TestEchoedKey(NPCTestCase):
    def test_an_error_body_echoing_the_key_is_masked(self):
        self.llm.enqueue(http_error(500, {"error": {"message": ECHO}}))
        with pytest.raises(LLMError) as caught:
            wait_for(get_client().chat([{"role": "user", "content": "hi"}]))
        assert KEY not in str(caught.value) and "sk-live" not in str(caught.value)

    def test_a_200_answer_echoing_the_key_reaches_no_screen_log_or_summary(self):
        self.fill(50)
        self.script.db.max_context_tokens = 1000
        self.llm.default = lambda body: ECHO
        logged = []
        with mock.patch.object(self.char1, "msg") as msg, ExitStack() as stack:
            for patch in watch_logs(logged):
                stack.enter_context(patch)
            immediate = self.call(CmdCompact(), "/force Marta")

            def said_so_far():
                return immediate + " ".join(str(c) for c in msg.call_args_list)

            wait_until(lambda: any(word in said_so_far()
                                   for word in ("Compacted", "skipped", "failed")))
            said = said_so_far()
        shown = said + " ".join(map(str, logged))
        assert "Compacted" in shown or "failed" in shown, shown
        stored = " ".join(m["content"] or "" for m in self.script.history)
        for text in (shown, stored):
            assert KEY not in text and "sk-live" not in text


# -- redaction on decoded text ---------------------------------------------------------------------

DECODED_KEY = "relcheck-Key-0123456789abcdef"  # not shaped like sk-...: only the key match finds it


@pytest.mark.parametrize("text", [
    DECODED_KEY, DECODED_KEY.upper(), DECODED_KEY.lower(),
    "relcheck-|rKey|n-0123456789abcdef", "relcheck-Key-0123 456789abcdef",
    "relcheck-\u200bKey-0123456789abcdef",
])
def test_the_configured_key_is_masked_in_any_case_and_split_by_markup(text):
    out = redact(f"the key you sent was {text}.", [DECODED_KEY])
    assert out == "the key you sent was ***.", out


def test_decoded_data_is_redacted_strings_and_json_inside_strings():
    from ai_contrib.core.redact import redact_data

    data = {"choices": [{"message": {"content": f"key {DECODED_KEY}", "tool_calls": [
        {"function": {"name": "f", "arguments": '{"text": "\\u0072elcheck-Key-0123456789abcdef"}'}}
    ]}}], "n": 3, "ok": True}
    out = redact_data(data, [DECODED_KEY])
    assert DECODED_KEY.casefold() not in str(out).casefold()
    assert out["n"] == 3 and out["ok"] is True
    assert "***" in out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert data["choices"][0]["message"]["content"] == f"key {DECODED_KEY}"  # input unchanged


def _escaped(text):
    """``text`` with every character JSON-escaped as ``\\uXXXX`` (what json.dumps never writes)."""
    return "".join(f"\\u{ord(char):04x}" for char in text)


class TestDecodedKey(NPCTestCase):
    """A server answering HTTP 200 with a valid completion whose content echoes the key in a
    JSON escape: only decoding spells it, so the raw-body redaction cannot see it."""

    def setUp(self):
        from django.test import override_settings

        from ai_contrib.llm.client import reset_client

        super().setUp()
        override = override_settings(AI_LLM_API_KEY=DECODED_KEY)
        override.enable()
        self.addCleanup(override.disable)
        wait_for(reset_client())

    def body(self, content=None, arguments=None):
        message = '{"role": "assistant", "content": "%s"' % (content or "")
        if arguments is not None:
            message += (', "tool_calls": [{"id": "c1", "type": "function", "function": '
                        '{"name": "noop", "arguments": "%s"}}]' % arguments)
        return ('{"choices": [{"index": 0, "message": %s}, "finish_reason": "stop"}], '
                '"usage": {}}' % message).encode()

    def test_content_tool_arguments_and_error_text_are_redacted_after_decoding(self):
        from tests.support.llm_double import raw_body

        self.llm.enqueue(
            raw_body(self.body("The key you sent was " + _escaped(DECODED_KEY))),
            raw_body(self.body("", '{\\"text\\": \\"' + _escaped(DECODED_KEY).replace(
                "\\", "\\\\") + '\\"}')),
            raw_body(b'{"error": {"message": "bad key ' + _escaped(DECODED_KEY).encode()
                     + b'"}}', status=401),
        )
        first = wait_for(get_client().chat([{"role": "user", "content": "hi"}]))
        self.assertEqual(first.content, "The key you sent was ***")
        self.assertNotIn(DECODED_KEY, str(first.raw))
        second = wait_for(get_client().chat([{"role": "user", "content": "hi"}]))
        self.assertNotIn(DECODED_KEY, str(second.tool_calls) + str(second.raw))
        with pytest.raises(LLMError) as caught:
            wait_for(get_client().chat([{"role": "user", "content": "hi"}]))
        self.assertNotIn(DECODED_KEY, str(caught.value) + str(caught.value.body))
        self.assertIn("***", str(caught.value))

    def test_the_room_the_archive_and_the_log_never_see_a_decoded_key(self):
        from tests.support.llm_double import raw_body

        self.llm.enqueue(raw_body(self.body("The key you sent was " + _escaped(DECODED_KEY)
                                            + ", Bearer " + _escaped(DECODED_KEY.upper()))))
        logged = []
        patches = watch_logs(logged)
        with mock.patch.object(self.char1, "msg") as heard1, \
                mock.patch.object(self.char2, "msg") as heard2:
            for patch in patches:
                patch.start()
            try:
                self.script.receive_speech(self.char1, "Marta, what key did your server get?")
                wait_for(self.script.run_tick())
            finally:
                for patch in patches:
                    patch.stop()
        answer = self.script.history[-1]
        self.assertEqual(answer["role"], "assistant")
        self.assertIn("***", answer["content"])
        room = " ".join(str(c) for c in heard1.call_args_list + heard2.call_args_list)
        self.assertIn("The key you sent was", room)
        archived = " ".join(m.get("content") or "" for m in self.script.archive.message_log())
        for seen in (room, archived, " ".join(logged), answer["content"]):
            self.assertNotIn(DECODED_KEY.casefold(), seen.casefold())
