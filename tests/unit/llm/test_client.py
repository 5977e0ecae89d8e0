"""
LLMClient against a real HTTP server on 127.0.0.1 (tests/support/llm_double.py): request shape,
parsing, error mapping, the one retry on a dropped keep-alive connection, the quiet connection pool.
"""

import json
import socket
import threading

import pytest
from django.test import override_settings
from twisted.internet import defer, reactor, task
from twisted.logger import globalLogPublisher
from twisted.trial import unittest

from ai_contrib.core.messages import make_message
from ai_contrib.llm import client as client_mod
from ai_contrib.llm import errors
from ai_contrib.llm.client import (
    ChatResult,
    LLMClient,
    get_client,
    parse_chat_response,
    reset_client,
    to_wire_message,
    wire_name,
)
from tests.support.llm_double import (
    drop,
    hold,
    http_error,
    json_body,
    malformed,
    reply,
    respond,
    sleep,
    start_llm_double,
    tool_calls,
)
from tests.support.twisted_util import wait_until

KEY = "sk-test-secret-key-123"
USER = [{"role": "user", "content": "Hello there"}]


class ClientTestBase(unittest.TestCase):
    def setUp(self):
        self.llm = start_llm_double(self)
        self.client = self.make_client()

    def make_client(self, **kwargs):
        kwargs.setdefault("base_url", self.llm.base_url)
        kwargs.setdefault("api_key", KEY)
        client = LLMClient(**kwargs)
        self.addCleanup(client.close)
        return client

    @defer.inlineCallbacks
    def assertFailsWith(self, d, exc_type):
        try:
            yield d
        except exc_type as err:
            return err
        self.fail(f"expected {exc_type.__name__}")


class TestClose(ClientTestBase):
    @defer.inlineCallbacks
    def test_a_reply_that_finishes_after_close_leaves_no_cached_connection(self):
        self.llm.enqueue(sleep(0.3, reply("late")))
        asked = self.client.chat(USER)
        yield self.client.close()  # the request is still under way
        result = yield asked
        self.assertEqual(result.content, "late")
        yield task.deferLater(reactor, 0.05, lambda: None)  # the connection goes idle
        # closed, not cached with an idle timer that would outlive the client
        self.assertEqual(sum(len(c) for c in self.client._pool._connections.values()), 0)
        self.assertFalse([call for call in reactor.getDelayedCalls()
                          if "_removeConnection" in repr(call)])


class TestSuccess(ClientTestBase):
    @defer.inlineCallbacks
    def test_reply_content_usage_and_request_shape(self):
        self.llm.enqueue(
            reply(
                "Well met, traveller.",
                usage={"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
            )
        )
        history = [
            make_message("system", "You are Bob the innkeeper."),
            make_message("user", "Hi Bob", name="Old Tom", metadata={"x": 1}),
        ]
        result = yield self.client.chat(history)

        self.assertIsInstance(result, ChatResult)
        self.assertEqual(result.content, "Well met, traveller.")
        self.assertEqual(result.finish_reason, "stop")
        self.assertEqual(
            result.usage, {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
        )
        self.assertEqual(result.tool_calls, [])
        self.assertEqual(result.raw["object"], "chat.completion")

        [call] = self.llm.calls
        self.assertEqual(call.path, "/v1/chat/completions")
        self.assertEqual(call.headers["authorization"], f"Bearer {KEY}")
        self.assertEqual(call.headers["content-type"], "application/json")
        body = call.body
        # only wire fields travel; the contrib's id/seq/timestamp/metadata stay home
        self.assertEqual(
            body["messages"],
            [
                {"role": "system", "content": "You are Bob the innkeeper."},
                {"role": "user", "content": "Hi Bob", "name": "Old_Tom"},
            ],
        )
        self.assertEqual(body["max_tokens"], 96)  # LLM_MAX_REPLY_TOKENS default
        self.assertEqual(body["temperature"], 0.7)
        self.assertEqual(body["model"], "smollm2-135m-instruct")
        # a server that is not llama.cpp's gets OpenAI's fields alone: no seed, tools or
        # repeat_penalty unless asked for
        self.assertEqual(set(body), {"model", "messages", "max_tokens", "temperature"})

    @defer.inlineCallbacks
    def test_arguments_and_extra_fields_override_defaults(self):
        result = yield self.client.chat(
            USER, model="other", max_tokens=7, temperature=0.0, stop=["\n"], repeat_penalty=None
        )
        self.assertEqual(result.content, "echo: Hello there")  # the double's default responder
        body = self.llm.last_request
        self.assertEqual(
            (body["model"], body["max_tokens"], body["temperature"]), ("other", 7, 0.0)
        )
        self.assertEqual(body["stop"], ["\n"])
        self.assertNotIn("repeat_penalty", body)

    @defer.inlineCallbacks
    def test_seed_setting_is_sent(self):
        with override_settings(AI_LLM_SEED=42, AI_LLM_MAX_REPLY_TOKENS=11):
            yield self.client.chat(USER)
        self.assertEqual(self.llm.last_request["seed"], 42)
        self.assertEqual(self.llm.last_request["max_tokens"], 11)

    @defer.inlineCallbacks
    def test_no_authorization_header_without_key(self):
        client = self.make_client(api_key=None)
        yield client.chat(USER)
        self.assertNotIn("authorization", self.llm.calls[-1].headers)

    @defer.inlineCallbacks
    def test_tool_calls_parsed_and_tools_sent(self):
        schema = [
            {"type": "function", "function": {"name": "remember", "parameters": {"type": "object"}}}
        ]
        self.llm.enqueue(tool_calls([("remember", {"fact": "Tom likes ale"})], content=""))
        result = yield self.client.chat(USER, tools=schema)
        self.assertEqual(self.llm.last_request["tools"], schema)
        self.assertEqual(result.finish_reason, "tool_calls")
        self.assertEqual(result.content, "")
        self.assertEqual(len(result.tool_calls), 1)
        call = result.tool_calls[0]
        self.assertEqual(call["type"], "function")
        self.assertEqual(call["function"]["name"], "remember")
        self.assertEqual(json.loads(call["function"]["arguments"]), {"fact": "Tom likes ale"})
        self.assertTrue(call["id"])

    @defer.inlineCallbacks
    def test_tool_call_arguments_sent_as_object_become_a_json_string(self):
        body = {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"function": {"name": "note", "arguments": {"a": 1}}}],
                    },
                    "finish_reason": "tool_calls",
                }
            ]
        }
        self.llm.enqueue(json_body(body))
        result = yield self.client.chat(USER)
        self.assertEqual(result.content, "")
        self.assertEqual(result.tool_calls[0]["function"]["arguments"], '{"a": 1}')
        self.assertEqual(result.tool_calls[0]["id"], "call_0")
        self.assertEqual(result.usage, {})

    @defer.inlineCallbacks
    def test_text_completion_sends_a_bare_prompt_to_completions(self):
        self.llm.enqueue(reply(" Bob rented the east room.", finish_reason="length"))
        result = yield self.client.complete("Summarize:\nBob: a room\nSUMMARY:\n", max_tokens=9,
                                            temperature=0.1)
        self.assertEqual(result.content, " Bob rented the east room.")
        self.assertEqual((result.finish_reason, result.tool_calls), ("length", []))
        self.assertGreater(result.usage["prompt_tokens"], 0)
        (call,) = self.llm.calls
        self.assertEqual(call.path, "/v1/completions")
        self.assertEqual(call.body["prompt"], "Summarize:\nBob: a room\nSUMMARY:\n")
        self.assertEqual((call.body["max_tokens"], call.body["temperature"]), (9, 0.1))
        self.assertNotIn("messages", call.body)
        self.assertEqual(call.headers["authorization"], f"Bearer {KEY}")

    @defer.inlineCallbacks
    def test_text_completion_errors(self):
        self.llm.enqueue(json_body({"choices": [{"message": {"content": "chat shape"}}]}))
        err = yield self.assertFailsWith(self.client.complete("x"), errors.LLMResponseError)
        self.assertIn("no text", str(err))
        self.llm.enqueue(http_error(500))
        yield self.assertFailsWith(self.client.complete("x"), errors.LLMHTTPError)

    @defer.inlineCallbacks
    def test_quiet_pool_logs_no_factory_lines(self):
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        yield self.client.chat(USER)
        yield self.client.close()
        texts = " ".join(str(e.get("log_format", "")) + repr(e.get("factory", "")) for e in events)
        self.assertNotIn("Starting factory", texts)
        self.assertNotIn("Stopping factory", texts)
        self.assertNotIn("_HTTP11ClientFactory", texts)


class TestErrors(ClientTestBase):
    @defer.inlineCallbacks
    def test_http_500(self):
        self.llm.enqueue(http_error(500))
        err = yield self.assertFailsWith(self.client.chat(USER), errors.LLMHTTPError)
        self.assertEqual(err.status, 500)
        self.assertIn("HTTP 500", str(err))
        self.assertIn(self.llm.base_url, str(err))
        self.assertIn("double error 500", str(err))
        self.assertNotIsInstance(err, errors.LLMContextOverflowError)

    @defer.inlineCallbacks
    def test_context_overflow_is_recognised(self):
        self.llm.enqueue(
            http_error(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "request (9000 tokens) exceeds the available context size (8192 tokens)",
                        "type": "exceed_context_size_error",
                    }
                },
            )
        )
        err = yield self.assertFailsWith(self.client.chat(USER), errors.LLMContextOverflowError)
        self.assertEqual(err.status, 400)
        self.assertIsInstance(err, errors.LLMHTTPError)

    @defer.inlineCallbacks
    def test_api_key_never_appears_in_errors(self):
        self.llm.enqueue(http_error(401, {"error": {"message": f"bad key {KEY}"}}))
        err = yield self.assertFailsWith(self.client.chat(USER), errors.LLMHTTPError)
        self.assertEqual(err.status, 401)
        self.assertNotIn(KEY, str(err))
        self.assertNotIn(KEY, err.body)
        self.assertIn("***", str(err))

    @defer.inlineCallbacks
    def test_a_url_with_a_login_is_refused_without_showing_it(self):
        login = self.llm.base_url.replace("http://", "http://admin:hunter2@")
        client = self.make_client(base_url=login)
        err = yield self.assertFailsWith(client.chat(USER), errors.LLMConnectionError)
        self.assertIn("AI_LLM_API_KEY", str(err))
        self.assertNotIn("hunter2", str(err) + repr(client))
        self.assertIn("http://***@127.0.0.1", str(err))
        self.assertEqual(len(self.llm.requests), 0)
        # control: the same server without the login answers
        self.llm.enqueue(reply("hello"))
        result = yield self.make_client().chat(USER)
        self.assertEqual(result.content, "hello")

    @defer.inlineCallbacks
    def test_timeout(self):
        client = self.make_client(timeout=0.3)
        self.llm.enqueue(hold(threading.Event()))  # never answered: the double stops first
        err = yield self.assertFailsWith(client.chat(USER), errors.LLMTimeoutError)
        self.assertIn("0.3 s", str(err))
        self.assertIn(self.llm.base_url, str(err))
        self.assertEqual(len(self.llm.requests), 1)  # a timeout is not retried

    @defer.inlineCallbacks
    def test_client_works_again_after_a_timeout(self):
        # the first request alone has the short limit: the second one, answered at once, is
        # given the client's own (AI_LLM_TIMEOUT), so a busy machine cannot time it out too
        client = self.make_client()
        self.llm.enqueue(hold(threading.Event()), reply("back"))
        yield self.assertFailsWith(client.chat(USER, timeout=0.3), errors.LLMTimeoutError)
        result = yield client.chat(USER)
        self.assertEqual(result.content, "back")

    @defer.inlineCallbacks
    def test_malformed_json(self):
        self.llm.enqueue(malformed())
        err = yield self.assertFailsWith(self.client.chat(USER), errors.LLMResponseError)
        self.assertIn("not JSON", str(err))

    @defer.inlineCallbacks
    def test_missing_choices(self):
        self.llm.enqueue(json_body({"object": "chat.completion", "choices": []}))
        err = yield self.assertFailsWith(self.client.chat(USER), errors.LLMResponseError)
        self.assertIn("no choices", str(err))

    @defer.inlineCallbacks
    def test_error_object_with_status_200(self):
        self.llm.enqueue(json_body({"error": {"message": "model is loading"}}))
        err = yield self.assertFailsWith(self.client.chat(USER), errors.LLMResponseError)
        self.assertIn("model is loading", str(err))

    @defer.inlineCallbacks
    def test_connection_refused(self):
        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        client = self.make_client(base_url=f"http://127.0.0.1:{port}/v1")
        err = yield self.assertFailsWith(client.chat(USER), errors.LLMConnectionError)
        self.assertIn(f"127.0.0.1:{port}", str(err))
        self.assertIsInstance(err, errors.LLMError)

    @defer.inlineCallbacks
    def test_caller_cancellation_is_not_an_llm_error(self):
        self.llm.enqueue(sleep(10))
        d = self.client.chat(USER)
        yield self.llm_seen(1)
        d.cancel()
        yield self.assertFailsWith(d, defer.CancelledError)

    @defer.inlineCallbacks
    def llm_seen(self, count):
        while len(self.llm.requests) < count:
            yield task.deferLater(reactor, 0.01, lambda: None)


class TestKeepAlive(ClientTestBase):
    @defer.inlineCallbacks
    def test_dropped_kept_alive_connection_is_retried_once(self):
        first = yield self.client.chat(USER)
        self.assertEqual(first.content, "echo: Hello there")
        # the server closes the kept-alive connection just as the next request arrives on it
        self.llm.enqueue(drop(), reply("second try"))
        second = yield self.client.chat(USER)
        self.assertEqual(second.content, "second try")
        conns = [c.connection for c in self.llm.calls]
        self.assertEqual(len(conns), 3)
        self.assertEqual(conns[0], conns[1])  # the drop hit the reused keep-alive connection
        self.assertNotEqual(conns[1], conns[2])  # the retry went over a fresh one

    @defer.inlineCallbacks
    def test_only_one_retry(self):
        self.llm.enqueue(drop(), drop(), reply("never"))
        err = yield self.assertFailsWith(self.client.chat(USER), errors.LLMConnectionError)
        self.assertIn("lost", str(err))
        self.assertEqual(len(self.llm.requests), 2)
        self.assertEqual(self.llm.pending, 1)

    @defer.inlineCallbacks
    def test_server_closing_idle_connections(self):
        llm = start_llm_double(self, idle_timeout=0.2)  # llama.cpp does this after 5 s
        client = self.make_client(base_url=llm.base_url)
        for _ in range(3):
            result = yield client.chat(USER)
            self.assertEqual(result.content, "echo: Hello there")
            while llm.open_connections:  # until the server has closed the idle connection
                yield task.deferLater(reactor, 0.01, lambda: None)
        self.assertEqual(len(llm.requests), 3)
        # each request came on a new connection: the server did close the one before
        self.assertEqual(len({call.connection for call in llm.calls}), 3)


class TestHostName(ClientTestBase):
    @defer.inlineCallbacks
    def test_host_name_base_url(self):
        client = self.make_client(base_url=f"http://localhost:{self.llm.port}/v1")
        result = yield client.chat(USER)
        self.assertEqual(result.content, "echo: Hello there")


def test_client_works_while_the_reactor_is_only_iterated(llm_double):
    """Evennia's Django test harness iterates the reactor without running it (no thread pool)."""
    from twisted.python.failure import Failure

    assert not reactor.running
    client = LLMClient(base_url=llm_double.base_url, api_key=KEY)
    box = []
    client.chat(USER).addBoth(box.append)
    wait_until(lambda: box)  # an answer while the reactor is only iterated
    closed = []
    client.close().addBoth(closed.append)
    wait_until(lambda: closed)
    assert not isinstance(box[0], Failure), box[0]
    assert box[0].content == "echo: Hello there"


class TestDefaultClient(unittest.TestCase):
    def tearDown(self):
        return reset_client()

    @defer.inlineCallbacks
    def test_get_client_uses_settings_and_is_shared(self):
        llm = start_llm_double(self, expected_api_key="setting-key")
        with override_settings(AI_LLM_BASE_URL=llm.base_url + "/", AI_LLM_API_KEY="setting-key"):
            yield reset_client()
            client = get_client()
            self.assertIs(get_client(), client)
            self.assertFalse(client.embedded)
            self.assertEqual(client.base_url, llm.base_url)
            result = yield client.chat(USER)
        self.assertEqual(result.content, "echo: Hello there")
        self.assertEqual(llm.calls[0].headers["authorization"], "Bearer setting-key")
        yield reset_client()
        self.assertIsNot(get_client(), client)


# ---- pure helpers (no I/O) --------------------------------------------------------------------


def test_wire_name():
    assert wire_name("Bob") == "Bob"
    assert wire_name("Old Tom") == "Old_Tom"
    assert wire_name("  Lady  Ann! ") == "Lady_Ann"
    assert wire_name("???") is None
    assert wire_name(None) is None
    assert len(wire_name("x" * 100)) == 64


def test_to_wire_message_keeps_tool_fields_and_drops_ours():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assistant = make_message("assistant", None, name="Bob", tool_calls=[call])
    tool = make_message("tool", "done", name="f", tool_call_id="c1")
    assert to_wire_message(assistant) == {
        "role": "assistant",
        "content": "",
        "name": "Bob",
        "tool_calls": [call],
    }
    assert to_wire_message(tool) == {"role": "tool", "content": "done", "tool_call_id": "c1"}
    assert to_wire_message({"role": "user", "content": "hi", "tool_calls": []}) == {
        "role": "user",
        "content": "hi",
    }


@pytest.mark.parametrize(
    "data",
    [
        [],
        "text",
        {"choices": "x"},
        {"choices": [{"finish_reason": "stop"}]},
        {"choices": [{"message": {"tool_calls": [{"function": {}}]}}]},
    ],
)
def test_parse_chat_response_rejects_bad_shapes(data):
    with pytest.raises(errors.LLMResponseError):
        parse_chat_response(data)


def test_parse_chat_response_content_parts():
    data = {
        "choices": [
            {"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}
        ]
    }
    assert parse_chat_response(data).content == "ab"


def test_http_error_message_and_masking():
    err = client_mod.http_error(
        503, b"x" * 2000 + b"KEY", "http://h/v1/chat/completions", api_key="KEY"
    )
    assert err.status == 503 and "HTTP 503" in str(err) and "http://h/v1" in str(err)
    assert len(err.body) == client_mod.BODY_EXCERPT_CHARS
    err = client_mod.http_error(500, b"oops KEY", "u", api_key="KEY")
    assert "KEY" not in str(err) and "oops ***" in str(err)


# ---- the LLM double itself (plain pytest, stdlib HTTP) ----------------------------------------

from tests.support.llm_double import LLMDouble, llm_double  # noqa: E402,F401  (the fixture)


def _post(url, body, headers=None):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_double_fixture_echoes_records_and_scripts(llm_double):
    url = llm_double.base_url + "/chat/completions"
    status, data = _post(url, {"messages": USER})
    assert status == 200 and data["choices"][0]["message"]["content"] == "echo: Hello there"
    llm_double.enqueue("plain string reply", http_error(503))
    assert (
        _post(url, {"messages": USER})[1]["choices"][0]["message"]["content"]
        == "plain string reply"
    )
    assert _post(url, {"messages": USER})[0] == 503
    assert llm_double.wait_for_requests(3)
    assert len(llm_double.requests) == 3 and llm_double.pending == 0
    assert _post(llm_double.base_url + "/nowhere", {})[0] == 404
    llm_double.enqueue(respond(lambda req: f"{len(req['messages'])} message(s)"))
    assert _post(url, {"messages": USER})[1]["choices"][0]["message"]["content"] == "1 message(s)"
    llm_double.reset()
    assert llm_double.requests == []


def test_double_default_responder_and_api_key():
    seen = []

    def responder(request_json):
        seen.append(request_json["max_tokens"])
        return {
            "choices": [
                {"message": {"role": "assistant", "content": "custom"}, "finish_reason": "stop"}
            ]
        }

    with LLMDouble(default=responder, expected_api_key="k") as llm:
        url = llm.base_url + "/chat/completions"
        assert _post(url, {"messages": USER, "max_tokens": 5})[0] == 401
        status, data = _post(
            url, {"messages": USER, "max_tokens": 5}, {"Authorization": "Bearer k"}
        )
        assert status == 200 and data["choices"][0]["message"]["content"] == "custom"
        assert seen == [5]
        assert len(llm.calls) == 2  # rejected requests are recorded too


def test_prompt_stats_from_llama_cpp_timings_and_from_hosted_usage():
    llama = client_mod.parse_chat_response({
        "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 812, "completion_tokens": 42},
        "timings": {"prompt_n": 42, "cache_n": 770, "predicted_n": 42, "prompt_ms": 120.5,
                    "predicted_ms": 900.0},
    })
    assert llama.prompt_stats() == {
        "prompt_tokens": 812, "cached_tokens": 770, "evaluated_tokens": 42,
        "generated_tokens": 42, "prompt_ms": 120.5, "generation_ms": 900.0,
    }
    hosted = client_mod.parse_chat_response({
        "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 9,
                  "prompt_tokens_details": {"cached_tokens": 896}},
    })
    stats = hosted.prompt_stats()
    assert (stats["cached_tokens"], stats["evaluated_tokens"], stats["generated_tokens"]) == \
        (896, 104, 9)
    silent = client_mod.parse_chat_response({
        "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10},
    })
    assert silent.prompt_stats() is None


class TestPurpose(ClientTestBase):
    """Every request may say what it is for (``PURPOSES``): never sent, carried by the answer."""

    @defer.inlineCallbacks
    def test_the_result_and_the_error_carry_the_purpose_and_the_server_never_sees_it(self):
        from ai_contrib.llm.client import PURPOSES

        self.assertEqual(set(PURPOSES), {"reply", "summary", "extraction", "importance", "answer",
                                         "warm", "handover"})
        self.llm.enqueue(reply("Aye."))
        result = yield self.client.chat(USER, purpose="reply")
        self.assertEqual(result.purpose, "reply")
        self.llm.enqueue(reply(" A summary."))
        result = yield self.client.complete("x\nSUMMARY:\n", purpose="summary")
        self.assertEqual(result.purpose, "summary")
        self.assertTrue(all("purpose" not in call.body for call in self.llm.calls))
        self.llm.enqueue(reply("untagged"))
        self.assertIsNone((yield self.client.chat(USER)).purpose)
        self.llm.enqueue(http_error(500))
        err = yield self.assertFailsWith(self.client.chat(USER, purpose="extraction"),
                                         errors.LLMHTTPError)
        self.assertEqual(err.purpose, "extraction")

    def test_an_unknown_purpose_raises_at_once(self):
        with self.assertRaises(ValueError) as caught:
            self.client.chat(USER, purpose="gossip")
        self.assertIn("gossip", str(caught.exception))
        self.assertEqual(self.llm.calls, [])


class TestReplySampling(ClientTestBase):
    """``AI_LLM_REPLY_SAMPLING``: extra sampling fields on replies, never on memory work."""

    @defer.inlineCallbacks
    def test_replies_carry_the_fields_and_summaries_do_not(self):
        fields = {"dry_multiplier": 0.8, "dry_allowed_length": 2}
        with override_settings(AI_LLM_REPLY_SAMPLING=fields):
            yield self.client.chat(USER, purpose="reply")
            reply_body = self.llm.last_request
            yield self.client.chat(USER, purpose="summary")
            summary_body = self.llm.last_request
            yield self.client.chat(USER, purpose="reply", dry_multiplier=None)
            dropped_body = self.llm.last_request
        self.assertEqual({k: reply_body.get(k) for k in fields}, fields)
        self.assertFalse(set(fields) & set(summary_body))
        # a caller's own value wins, as for every extra field
        self.assertNotIn("dry_multiplier", dropped_body)
        self.assertEqual(dropped_body["dry_allowed_length"], 2)

    @defer.inlineCallbacks
    def test_auto_sends_the_embedded_set_to_the_embedded_model_only(self):
        from ai_contrib.llm.client import EMBEDDED_REPLY_SAMPLING

        self.assertTrue(EMBEDDED_REPLY_SAMPLING)
        # (memory work in the memory server's first slot: test_memory_work_keeps_the_memory_...)
        with override_settings(AI_LLM_REPLY_SAMPLING="auto", AI_LLM_BASE_URL=None,
                               AI_EMBEDDED_MEMORY_SERVER=False):
            yield self.client.chat(USER, purpose="reply")  # a server at a base URL
            embedded = self.make_client(base_url=None)  # the embedded model (not started here)
            self.assertTrue(embedded.embedded)
            self.assertEqual(embedded.request_fields("reply"),
                             {"repeat_penalty": 1.25, **EMBEDDED_REPLY_SAMPLING})
            self.assertEqual(embedded.request_fields("summary"), {"repeat_penalty": 1.25})
        self.assertFalse(set(EMBEDDED_REPLY_SAMPLING) & set(self.llm.last_request))
        with override_settings(AI_LLM_REPLY_SAMPLING=None, AI_LLM_BASE_URL=None):
            self.assertEqual(self.make_client(base_url=None).request_fields("reply"),
                             {"repeat_penalty": 1.25})

    def test_a_bad_value_is_a_clear_error(self):
        with override_settings(AI_LLM_REPLY_SAMPLING="dry"), self.assertRaises(ValueError) as err:
            self.client.chat(USER, purpose="reply")
        self.assertIn("AI_LLM_REPLY_SAMPLING", str(err.exception))
        self.assertEqual(self.llm.calls, [])


SMOLLM2_FILE = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"


class TestSamplingPerServer(ClientTestBase):
    """Fields outside OpenAI's API go to llama.cpp servers only, as the model's profile; a
    server that refuses one is asked again without them once, and never sent them again."""

    def double(self, **kwargs):
        llm = start_llm_double(self, **kwargs)
        return llm, self.make_client(base_url=llm.base_url)

    @defer.inlineCallbacks
    def ask_all(self, client):
        """A reply, a summary and a text completion; their request bodies."""
        yield client.chat(USER, purpose="reply")
        yield client.chat(USER, purpose="summary")
        yield client.complete("x\nSUMMARY:\n", purpose="summary")

    @defer.inlineCallbacks
    def test_llama_cpp_with_a_profiled_model_gets_its_profile_and_others_get_the_standard_fields(
            self):
        from ai_contrib.llm.client import EMBEDDED_REPLY_SAMPLING
        from tests.support.llm_double import OPENAI_CHAT_FIELDS, OPENAI_COMPLETION_FIELDS

        llama, client = self.double(model_path=SMOLLM2_FILE)
        yield self.ask_all(client)
        reply_body, summary_body, completion_body = llama.requests
        self.assertEqual(llama.gets, ["/props"])  # asked once, for every request
        self.assertEqual({k: reply_body[k] for k in ("repeat_penalty", *EMBEDDED_REPLY_SAMPLING)},
                         {"repeat_penalty": 1.25, **EMBEDDED_REPLY_SAMPLING})
        # DRY is for replies only: a summary copies names from its source
        self.assertEqual(summary_body["repeat_penalty"], 1.25)
        self.assertFalse(set(EMBEDDED_REPLY_SAMPLING) & set(summary_body))
        self.assertEqual(completion_body["repeat_penalty"], 1.25)
        # the same requests to a server that is not llama.cpp's: the standard fields alone
        generic, client = self.double()
        yield self.ask_all(client)
        reply_body, summary_body, completion_body = generic.requests
        self.assertLessEqual(set(reply_body), OPENAI_CHAT_FIELDS)
        self.assertLessEqual(set(summary_body), OPENAI_CHAT_FIELDS)
        self.assertLessEqual(set(completion_body), OPENAI_COMPLETION_FIELDS)
        self.assertEqual(client.known_server(), {"kind": "openai", "model": None})

    @defer.inlineCallbacks
    def test_an_unknown_model_on_llama_cpp_gets_no_profile(self):
        llama, client = self.double(model_path="/models/qwen2.5-1.5b-instruct-q4_k_m.gguf",
                                    n_ctx=4096)
        yield client.chat(USER, purpose="reply")
        self.assertEqual(client.known_server(),
                         {"kind": "llama.cpp", "model": "qwen2.5-1.5b-instruct-q4_k_m.gguf"})
        self.assertEqual(set(llama.last_request), {"model", "messages", "max_tokens",
                                                   "temperature"})
        # the same /props answer told the client the window: no second request for it
        self.assertEqual((yield client.context_window()), 4096)
        self.assertEqual(llama.gets, ["/props"])

    @defer.inlineCallbacks
    def test_the_server_kind_setting_forces_either_way(self):
        llama, client = self.double(model_path=SMOLLM2_FILE)
        with override_settings(AI_LLM_SERVER_KIND="openai"):
            yield client.chat(USER, purpose="reply")
        self.assertNotIn("repeat_penalty", llama.last_request)
        self.assertEqual(llama.gets, [])  # not asked at all
        yield client.chat(USER, purpose="reply")  # "auto" again: the server says llama.cpp
        self.assertEqual(llama.last_request["repeat_penalty"], 1.25)
        # a server that does not say what it is, named llama.cpp: the profile of the model asked
        generic, client = self.double()
        with override_settings(AI_LLM_SERVER_KIND="llama.cpp"):
            yield client.chat(USER, purpose="reply", model="smollm2:135m")
        self.assertEqual(generic.last_request["repeat_penalty"], 1.25)
        with override_settings(AI_LLM_SERVER_KIND="vllm"), self.assertRaises(ValueError):
            client.chat(USER)

    @defer.inlineCallbacks
    def test_what_the_admin_sets_goes_to_any_server(self):
        generic, client = self.double()
        with override_settings(AI_LLM_REPEAT_PENALTY=1.1, AI_LLM_REPEAT_LAST_N=128):
            yield client.chat(USER, purpose="summary")
        self.assertEqual((generic.last_request["repeat_penalty"],
                          generic.last_request["repeat_last_n"]), (1.1, 128))
        # and wins over a profile
        llama, client = self.double(model_path=SMOLLM2_FILE)
        with override_settings(AI_LLM_REPEAT_PENALTY=1.05):
            yield client.chat(USER, purpose="reply")
        self.assertEqual(llama.last_request["repeat_penalty"], 1.05)
        self.assertEqual(llama.last_request["dry_multiplier"], 0.8)

    @defer.inlineCallbacks
    def test_a_strict_server_refusing_a_field_is_asked_again_without_it_and_remembered(self):
        strict, client = self.double(strict=True)
        with override_settings(AI_LLM_REPEAT_PENALTY=1.1), \
                self.assertLogs("ai_contrib.llm.client", "WARNING") as logs:
            strict.enqueue(reply("Aye."), reply("Again."))
            first = yield client.chat(USER, purpose="reply")
            second = yield client.complete("x\nSUMMARY:\n", purpose="summary")
        self.assertEqual((first.content, second.content), ("Aye.", "Again."))
        # refused once (HTTP 400, OpenAI's body), then never sent again
        self.assertEqual(["repeat_penalty" in body for body in strict.requests],
                         [True, False, False])
        self.assertEqual(len(logs.records), 1)
        message = logs.records[0].getMessage()
        self.assertIn("repeat_penalty", message)
        self.assertIn(f"127.0.0.1:{strict.port}", message)
        self.assertNotIn(KEY, message)
        self.assertTrue(client.extra_fields_refused)

    @defer.inlineCallbacks
    def test_other_refusals_are_not_asked_again(self):
        llama, client = self.double(model_path=SMOLLM2_FILE, n_ctx=64)
        # a context overflow of a request with extra fields: the caller's to handle
        yield self.assertFailsWith(client.chat([{"role": "user", "content": "x" * 400}]),
                                   errors.LLMContextOverflowError)
        self.assertEqual(len(llama.requests), 1)
        self.assertIn("repeat_penalty", llama.last_request)
        # a refusal of a standard field (structured output) is the extraction's to handle
        strict, client = self.double(strict=True)
        strict.enqueue(http_error(400, {"error": {"message": "response_format is not supported",
                                                  "type": "invalid_request_error"}}))
        err = yield self.assertFailsWith(client.chat(USER, response_format={"type": "json"}),
                                         errors.LLMHTTPError)
        self.assertTrue(errors.refuses_response_format(err))
        self.assertEqual(len(strict.requests), 1)
        self.assertFalse(client.extra_fields_refused)


@pytest.mark.parametrize("memory_server", [True, False])
def test_memory_work_keeps_the_memory_servers_first_slot(memory_server):
    # its last slot is for the cache warm-ups handed over (docs/design.md, "Warm-ups handed
    # over"); without a memory server, memory work shares the reply server's slots as any
    with override_settings(AI_LLM_BASE_URL=None, AI_LLM_API_KEY=None):
        client = LLMClient()  # on the embedded servers: nothing starts before a request
    try:
        with override_settings(AI_EMBEDDED_MEMORY_SERVER=memory_server):
            fields = {purpose: client.request_fields(purpose)
                      for purpose in ("summary", "extraction", "reply", "handover")}
    finally:
        client.close()
    pinned = {purpose for purpose, sent in fields.items() if sent.get("id_slot") == 0}
    assert pinned == ({"summary", "extraction"} if memory_server else set())
