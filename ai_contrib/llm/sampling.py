"""
Which fields a request may carry besides the standard OpenAI ones, server by server and model
by model (``docs/design.md``, "Sampling per server and model"). Pure data and functions: the
client (:mod:`ai_contrib.llm.client`) asks the server what it is and applies them.

llama.cpp's server takes sampling fields that OpenAI's chat completions API does not know
(``repeat_penalty``, ``repeat_last_n``, the DRY sampler's ``dry_*``...), and OpenAI's API answers
a request carrying one with HTTP 400 ``"Unrecognized request argument supplied: <name>"``. A
value measured for one small model is also wrong for another. So a request carries:

- the standard fields (:data:`OPENAI_FIELDS`), to every server;
- the sampling profile of the model (:data:`PROFILES`, chosen by :func:`profile_for` from the
  model name the server reports), only to a llama.cpp server: the embedded model, a server whose
  ``GET /props`` answers as llama.cpp's does (:func:`llama_cpp_model`), or any server
  ``AI_LLM_SERVER_KIND = "llama.cpp"`` names; an unknown model has no profile;
- what the admin sets (``AI_LLM_REPEAT_PENALTY``, ``AI_LLM_REPEAT_LAST_N``, an
  ``AI_LLM_REPLY_SAMPLING`` dict), to every server;
- nothing else once the server refused a field (:func:`refused_fields`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

#: The request fields of OpenAI's chat completions (``POST /chat/completions``) and text
#: completions (``POST /completions``) APIs, from OpenAI's API reference: every OpenAI-compatible
#: server takes these (or ignores the ones it does not implement).
OPENAI_FIELDS = frozenset({
    # chat completions
    "model", "messages", "audio", "frequency_penalty", "function_call", "functions",
    "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities",
    "n", "parallel_tool_calls", "prediction", "presence_penalty", "reasoning_effort",
    "response_format", "seed", "service_tier", "stop", "store", "stream", "stream_options",
    "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
    # text completions
    "prompt", "best_of", "echo", "suffix",
})

#: The kinds of server :data:`AI_LLM_SERVER_KIND` names: llama.cpp's server (its own sampling
#: fields are taken) or any other OpenAI-compatible server (the standard fields only).
LLAMA_CPP = "llama.cpp"
OPENAI = "openai"

#: The reply fields of the embedded SmolLM2-135M (``docs/design.md``, "The embedded model"):
#: llama.cpp's DRY sampler ("don't repeat yourself"), which penalises a token that would extend
#: a sequence already in the last ``dry_penalty_last_n`` tokens beyond ``dry_allowed_length``
#: tokens, more steeply the longer the repeat. Chosen on LoCoMo conv-26 (``make bench-world``,
#: part 4): replies repeating a 4-gram of the previous reply 28 % -> 7 %, with no loss on the
#: other figures; a 4-token allowance with a lighter repeat penalty kept 25 %.
EMBEDDED_REPLY_SAMPLING = {
    "dry_multiplier": 0.8,
    "dry_base": 1.75,
    "dry_allowed_length": 2,
    "dry_penalty_last_n": 1024,
}


@dataclass(frozen=True)
class SamplingProfile:
    """
    The sampling fields measured for one model on llama.cpp's server.

    Attributes:
        name (str): the profile's name, for logs and docs (``"smollm2-135m"``).
        models (tuple[str, ...]): pieces of a model name that pick this profile, in the form
            :func:`model_key` gives (lower case, runs of other characters as one ``-``).
        every_request (dict): fields sent with every request (replies, summaries, extraction).
        replies (dict): fields sent with replies only (a summary or a fact must copy names and
            phrases from its source, which a repeat sampler such as DRY penalises).
        source (str): where the values were measured.
    """

    name: str
    models: tuple[str, ...]
    every_request: dict = field(default_factory=dict)
    replies: dict = field(default_factory=dict)
    source: str = ""


#: The measured profiles, first match wins. A model not named here gets no extra field.
PROFILES = (
    SamplingProfile(
        name="smollm2-135m",
        models=("smollm2-135m",),
        # at repeat_penalty 1.0 the model loops; 1.2-1.3 stops it
        every_request={"repeat_penalty": 1.25},
        replies=EMBEDDED_REPLY_SAMPLING,
        source='docs/design.md, "The embedded model" (make bench-world, part 4)',
    ),
)

_NOT_NAME = re.compile(r"[^a-z0-9]+")


def model_key(name) -> str:
    """
    A model name in the form profiles match: lower case, each run of other characters one ``-``
    (``"SmolLM2-135M-Instruct.Q4_1.gguf"`` -> ``"smollm2-135m-instruct-q4-1-gguf"``,
    ``"smollm2:135m"`` -> ``"smollm2-135m"``); ``""`` for None.
    """
    return _NOT_NAME.sub("-", str(name or "").lower()).strip("-")


def profile_for(model_name) -> SamplingProfile | None:
    """
    The profile of the model called ``model_name`` (a GGUF file name, a path, an Ollama or
    Hugging Face name), or None for a model no profile names.

    Args:
        model_name (str | None): e.g. ``"/models/SmolLM2-135M-Instruct.Q4_1.gguf"``.

    Returns:
        SamplingProfile | None
    """
    key = model_key(os.path.basename(str(model_name or "")))
    if not key:
        return None
    return next((profile for profile in PROFILES
                 if any(piece in key for piece in profile.models)), None)


def llama_cpp_model(props) -> str | None:
    """
    Read llama.cpp's ``GET /props`` answer: the file name of the model it serves (``""`` when it
    names none), or None when ``props`` is not llama.cpp's (no ``default_generation_settings``).

    Args:
        props: the decoded JSON body, e.g. ``{"default_generation_settings": {"n_ctx": 8192},
            "model_path": "/models/x.gguf", ...}``.

    Returns:
        str | None
    """
    if not isinstance(props, dict) or not isinstance(props.get("default_generation_settings"),
                                                     dict):
        return None
    return os.path.basename(str(props.get("model_path") or ""))


def sampling_fields(kind, model_name, purpose, explicit, profile_replies=True
                    ) -> dict[str, Any]:
    """
    The fields a request sends besides the ones every request has.

    Args:
        kind (str | None): :data:`LLAMA_CPP`, :data:`OPENAI` or None (not known yet: treated as
            :data:`OPENAI`).
        model_name (str | None): the model the server reports (else the one asked for).
        purpose (str | None): the request's purpose; ``"reply"`` adds the profile's reply fields.
        explicit (dict): what the admin set, sent to any server (and winning over the profile).
        profile_replies (bool): a reply takes the profile's reply fields
            (``AI_LLM_REPLY_SAMPLING = "auto"``).

    Returns:
        dict: body fields (a new dict), e.g. ``{"repeat_penalty": 1.25, "dry_multiplier": 0.8}``.
    """
    fields = {}
    profile = profile_for(model_name) if kind == LLAMA_CPP else None
    if profile is not None:
        fields.update(profile.every_request)
        if purpose == "reply" and profile_replies:
            fields.update(profile.replies)
    fields.update(explicit)
    return fields


def standard_only(payload) -> dict[str, Any]:
    """``payload`` without the fields outside :data:`OPENAI_FIELDS` (a new dict)."""
    return {key: value for key, value in payload.items() if key in OPENAI_FIELDS}


def extra_fields(payload) -> list[str]:
    """The names of ``payload``'s fields outside :data:`OPENAI_FIELDS`, in its order."""
    return [key for key in payload if key not in OPENAI_FIELDS]


#: what servers say when they refuse a field they do not know: OpenAI ("Unrecognized request
#: argument(s) supplied: ..."), pydantic-based servers ("Extra inputs are not permitted"), others
_REFUSALS = ("unrecognized request argument", "extra inputs are not permitted", "unknown field")


def refused_fields(status, body, sent) -> list[str]:
    """
    The extra fields an error response refuses: those of ``sent`` that an HTTP 400 or 422 body
    names, all of them when it says only that an argument is not recognised; ``[]`` otherwise.

    Args:
        status (int): the HTTP status.
        body (str): the response body (or its start).
        sent (list[str]): the extra fields the request carried (:func:`extra_fields`).

    Returns:
        list[str]: a sublist of ``sent``.
    """
    if status not in (400, 422) or not sent:
        return []
    text = str(body or "").lower()
    named = [name for name in sent if re.search(rf"\b{re.escape(name.lower())}\b", text)]
    if named:
        return named
    return list(sent) if any(phrase in text for phrase in _REFUSALS) else []
