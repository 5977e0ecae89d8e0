"""
The sampling profiles and the field rules of ``ai_contrib.llm.sampling``: which model gets which
profile, which server gets which fields, and which error refuses which field.
"""

import pytest

from ai_contrib.llm.sampling import (
    EMBEDDED_REPLY_SAMPLING,
    LLAMA_CPP,
    OPENAI,
    OPENAI_FIELDS,
    extra_fields,
    llama_cpp_model,
    model_key,
    profile_for,
    refused_fields,
    sampling_fields,
    standard_only,
)


@pytest.mark.parametrize("name", [
    "SmolLM2-135M-Instruct.Q4_1.gguf",       # the embedded model's file
    "/models/SmolLM2-135M-Instruct-Q8_0.gguf",  # a path, as llama.cpp's /props reports it
    "smollm2-135m-instruct",                 # AI_LLM_MODEL's default
    "smollm2:135m",                          # Ollama's name
    "HuggingFaceTB/SmolLM2-135M-Instruct",   # Hugging Face's
])
def test_the_embedded_model_keeps_its_measured_profile_under_every_name(name):
    profile = profile_for(name)
    assert profile is not None and profile.name == "smollm2-135m"
    assert profile.every_request == {"repeat_penalty": 1.25}
    assert profile.replies == EMBEDDED_REPLY_SAMPLING


@pytest.mark.parametrize("name", [
    "qwen2.5-1.5b-instruct-q4_k_m.gguf", "gpt-4o-mini", "SmolLM2-1.7B-Instruct.gguf", "", None])
def test_models_without_a_measured_profile_get_none(name):
    assert profile_for(name) is None


def test_model_key_folds_case_and_separators():
    assert model_key("SmolLM2-135M-Instruct.Q4_1.gguf") == "smollm2-135m-instruct-q4-1-gguf"
    assert model_key("smollm2:135m") == "smollm2-135m"
    assert model_key(None) == ""


def test_the_profile_goes_to_llama_cpp_only_and_the_admin_s_fields_everywhere():
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert sampling_fields(LLAMA_CPP, name, "reply", {}) == {"repeat_penalty": 1.25,
                                                               **EMBEDDED_REPLY_SAMPLING}
    assert sampling_fields(LLAMA_CPP, name, "summary", {}) == {"repeat_penalty": 1.25}
    assert sampling_fields(LLAMA_CPP, name, "reply", {}, profile_replies=False) == {
        "repeat_penalty": 1.25}
    for kind in (OPENAI, None):  # another server, or one not known yet
        assert sampling_fields(kind, name, "reply", {}) == {}
        assert sampling_fields(kind, name, "reply", {"repeat_penalty": 1.1}) == {
            "repeat_penalty": 1.1}
    # what the admin set wins over the profile
    assert sampling_fields(LLAMA_CPP, name, "summary", {"repeat_penalty": 1.0}) == {
        "repeat_penalty": 1.0}


def test_llama_cpp_props_are_recognised_and_others_are_not():
    props = {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 2,
             "model_path": "/srv/models/SmolLM2-135M-Instruct.Q4_1.gguf"}
    assert llama_cpp_model(props) == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert llama_cpp_model({"default_generation_settings": {}}) == ""
    assert llama_cpp_model({"object": "list", "data": []}) is None
    assert llama_cpp_model(["not", "a", "dict"]) is None


def test_standard_and_extra_fields_split_a_body():
    body = {"model": "m", "messages": [], "max_tokens": 5, "repeat_penalty": 1.25,
            "dry_base": 1.75, "response_format": {}, "seed": 1}
    assert extra_fields(body) == ["repeat_penalty", "dry_base"]
    assert standard_only(body) == {"model": "m", "messages": [], "max_tokens": 5,
                                   "response_format": {}, "seed": 1}
    assert {"prompt", "tools", "stop", "top_p"} <= OPENAI_FIELDS


def test_refused_fields_reads_openai_and_other_servers_refusals():
    sent = ["repeat_penalty", "dry_base"]
    openai = ('{"error": {"message": "Unrecognized request argument supplied: repeat_penalty", '
              '"type": "invalid_request_error", "param": null, "code": null}}')
    assert refused_fields(400, openai, sent) == ["repeat_penalty"]
    both = "Unrecognized request arguments supplied: dry_base, repeat_penalty"
    assert refused_fields(400, both, sent) == ["repeat_penalty", "dry_base"]
    # a pydantic server that names no field: every extra one
    assert refused_fields(422, "Extra inputs are not permitted", sent) == sent
    # not a refusal of an extra field
    assert refused_fields(400, "response_format is not supported", sent) == []
    assert refused_fields(400, "dry_base_extra is odd", sent) == []  # whole words only
    assert refused_fields(500, openai, sent) == []
    assert refused_fields(400, openai, []) == []
