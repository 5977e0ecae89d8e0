"""
Secrets never leave the LLM client: one redaction for every string made from what a server sent.

A misbehaving or hostile server (or a proxy) may echo the request's ``Authorization`` header in
an error body, or in a 200 answer's text; that text then reaches exceptions, the server log, an
admin's screen and even a stored summary. So the client redacts every response body before it
is parsed, whatever its status, and then every string of the *decoded* body (:func:`redact_data`):
a JSON escape (``"\\u0073k-..."``) spells the key only once decoded, and a tool call's
``arguments`` are JSON inside JSON, so they are decoded and redacted again
(``docs/design.md``, "Secrets").

A configured secret is found in any letter case and with markup or invisible characters between
its characters (Evennia colour codes such as ``|r``, whitespace, zero-width characters), the
spellings a server could use to slip it past a plain comparison.

Pure functions.
"""

from __future__ import annotations

import json
import re
from typing import Any

MASK = "***"
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{4,}")
_AUTHORIZATION = re.compile(r"(?i)\b(authorization)(\\?[\"']?\s*[:=]\s*\\?[\"']?)(?!bearer\b)[^\s\"',}\\]{4,}")
_KEY_LIKE = re.compile(r"(?i)\b(sk|pk|rk)-[A-Za-z0-9_-]{8,}")
# the login part of a URL: "http://user:password@host" (a server's URL an admin configured)
_URL_LOGIN = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@]*@")
# what may stand between a secret's characters in a spelling meant to hide it: whitespace,
# zero-width and other invisible format characters, Evennia markup codes (|r, |[b, |055, |/)
_GAP = (r"(?:[\s\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u2064\ufeff]"
        r"|\|(?:\[?[A-Za-z*^_/<>-]|[0-5]{3}|#[0-9a-fA-F]{6}))*")
_PATTERNS = {}


def _secret_pattern(secret):
    pattern = _PATTERNS.get(secret)
    if pattern is None:
        pattern = re.compile(_GAP.join(re.escape(char) for char in secret), re.IGNORECASE)
        if len(_PATTERNS) > 32:
            _PATTERNS.clear()
        _PATTERNS[secret] = pattern
    return pattern


def redact(text, secrets=()) -> str:
    """
    ``text`` with every secret masked as ``***``: the given ``secrets`` (the configured API
    key) wherever they appear, in any case and split by whitespace, invisible characters or
    markup codes; any ``Bearer <token>``, any ``Authorization: <value>``, OpenAI-style keys
    (``sk-...``) and the login part of a URL (``http://user:password@host`` ->
    ``http://***@host``).

    Args:
        text (str): any text from a server.
        secrets (iterable[str]): literal values to mask (empty ones are ignored).

    Returns:
        str
    """
    text = str(text)
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = _secret_pattern(secret).sub(MASK, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _URL_LOGIN.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    return _KEY_LIKE.sub(MASK, text)


def has_login(url) -> bool:
    """Whether ``url`` holds a user name or password (``http://user:password@host``)."""
    return bool(_URL_LOGIN.search(str(url or "")))


def redact_data(data, secrets=()) -> Any:
    """
    Decoded JSON (``dict``, ``list``, ``str``, numbers...) with :func:`redact` applied to every
    string in it, keys included. A string that is itself a JSON object or array (a tool call's
    ``arguments``) is decoded, redacted and encoded again when that changes it, so a key
    escaped twice is found too.

    Args:
        data: what ``json.loads`` returned.
        secrets (iterable[str]): as for :func:`redact`.

    Returns:
        a new structure of the same shape (the input is not changed).
    """
    secrets = tuple(secrets)
    if isinstance(data, str):
        return _redact_string(data, secrets)
    if isinstance(data, dict):
        return {redact_data(key, secrets) if isinstance(key, str) else key:
                redact_data(value, secrets) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(item, secrets) for item in data]
    return data


def _redact_string(text, secrets):
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and "\\u" in stripped:
        try:
            inner = json.loads(stripped)
        except ValueError:
            inner = None
        if isinstance(inner, (dict, list)):
            cleaned = redact_data(inner, secrets)
            if cleaned != inner:
                return json.dumps(cleaned, ensure_ascii=False)
    return redact(text, secrets)
