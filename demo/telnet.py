"""
A scripted telnet player for Evennia games, on ``telnetlib3`` (asyncio).

Evennia sends no prompt and puts ANSI colour codes mid-line, so a player never waits for a prompt:
it reads until a regular expression matches the (ANSI-stripped) text received since it last read,
or until the server has been quiet for a while. Everything sent and received is written, line by
line and time-stamped, to an optional :class:`Transcript` shared by several players.

Typical use::

    async with TelnetPlayer("alice", port=4000, transcript=t) as alice:
        await alice.login("alice", "secret-pw", create=True)
        await alice.command("north")
        reply = await alice.command("talk Marta = Hello!", until=r"Marta says", timeout=60)
"""

import asyncio
import re
import time

import telnetlib3

#: ANSI escape sequences: CSI (colours, cursor), OSC (titles) and two-byte escapes.
ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")

LOGIN_OK_RE = r"You become |You are now logged in|Welcome back"
LOGIN_FAIL_RE = r"password is incorrect|Too many login failures|You have been banned|Usage"
CREATE_CONFIRM_RE = r"\[Y\]/N\?"
CREATE_OK_RE = r"A new account '[^']+' was created"
# Evennia's refusals: name taken or invalid, weak password, throttled, registration disabled
CREATE_FAIL_RE = (
    r"already|not available|[Ss]orry|not allowed|must|too many|[Ii]nvalid|disabled|Usage"
    r"|This password"  # Django's password validators: too short, too common, entirely numeric
)


_PARTIAL_ESCAPE_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*)?$")

def strip_ansi(text):
    """``text`` without ANSI escape sequences and carriage returns (str -> str)."""
    return ANSI_RE.sub("", text).replace("\r", "")


class TelnetError(RuntimeError):
    """Connecting or logging in failed, or the server closed the connection."""


class Transcript:
    """
    A time-stamped log of what several players sent and received, in arrival order.

    Each line: ``[  12.34s] alice  > talk Marta = Hi`` (sent) or ``[  12.80s] alice  < Marta
    says, "Hello"`` (received, ANSI stripped). Times are seconds since the transcript began.

    Args:
        path (str | Path | None): file to write, line-buffered (None keeps lines in memory only).
        echo (callable | None): called with each formatted line, e.g. ``print``.
    """

    def __init__(self, path=None, echo=None):
        self.t0 = time.monotonic()
        self.lines = []
        self.echo = echo
        self._fh = open(path, "w", encoding="utf-8", buffering=1) if path else None

    def record(self, who, direction, text):
        """Add one line; ``direction`` is ">" (sent), "<" (received) or "#" (a note)."""
        line = f"[{time.monotonic() - self.t0:8.2f}s] {who:<8} {direction} {text}"
        self.lines.append(line)
        if self._fh:
            self._fh.write(line + "\n")
        if self.echo:
            self.echo(line)

    def note(self, text, who="demo"):
        """Add a comment line (a section heading, a measurement)."""
        self.record(who, "#", text)

    def close(self):
        if self._fh:
            self._fh.close()
            self._fh = None


class TelnetPlayer:
    """
    One telnet connection to an Evennia game, driven by a script.

    Args:
        label (str): the name used in the transcript.
        port (int): the game's telnet port.
        host (str): default 127.0.0.1.
        transcript (Transcript | None): where to log traffic.

    Attributes:
        received (str): all text received so far (ANSI stripped).
    """

    def __init__(self, label, port, host="127.0.0.1", transcript=None):
        self.label = label
        self.host = host
        self.port = port
        self.transcript = transcript
        self.received = ""
        self._read_pos = 0  # start of the text not yet returned by a read
        self._partial = ""  # received text after the last newline, not yet in the transcript
        self._reader = None
        self._writer = None
        self._pump_task = None
        self._new_data = asyncio.Event()
        self._last_data_at = time.monotonic()
        self.closed = False

    # ------------------------------------------------------------------ connection

    async def connect(self, timeout=30.0, banner_quiet=0.5):
        """
        Open the connection and wait for the connection screen.

        Returns:
            str: the connection screen text.

        Raises:
            TelnetError: if the connection is refused or no screen arrives in ``timeout`` s.
        """
        try:
            self._reader, self._writer = await asyncio.wait_for(
                telnetlib3.open_connection(
                    self.host,
                    self.port,
                    encoding="utf8",
                    force_binary=True,  # Evennia speaks UTF-8 without negotiating BINARY
                    connect_minwait=0.05,
                    connect_maxwait=1.0,
                    cols=200,
                ),
                timeout,
            )
        except (OSError, asyncio.TimeoutError) as err:
            raise TelnetError(f"{self.label}: cannot connect to {self.host}:{self.port}: {err}")
        self._pump_task = asyncio.create_task(self._pump())
        self._note(f"connected to {self.host}:{self.port}")
        match, text = await self.read_until(r"connect|create", timeout=timeout)
        if not match:
            raise TelnetError(f"{self.label}: no connection screen in {timeout} s: {text!r}")
        return text + await self.read_quiet(quiet=banner_quiet, timeout=5)

    async def _pump(self):
        """Move everything the server sends into :attr:`received` and the transcript."""
        held = ""  # an escape sequence split across two reads is cleaned once it is whole
        try:
            while True:
                chunk = await self._reader.read(4096)
                if not chunk:
                    break
                text = held + chunk
                tail = _PARTIAL_ESCAPE_RE.search(text)
                text, held = (text[: tail.start()], text[tail.start() :]) if tail else (text, "")
                self._on_text(strip_ansi(text))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed = True
            self._flush_partial()
            self._new_data.set()

    def _on_text(self, text):
        self.received += text
        self._last_data_at = time.monotonic()
        self._partial += text
        *complete, self._partial = self._partial.split("\n")
        for line in complete:
            self._log("<", line)
        self._new_data.set()

    def _flush_partial(self):
        if self._partial:
            self._log("<", self._partial)
            self._partial = ""

    def _log(self, direction, text):
        if self.transcript is not None:
            self.transcript.record(self.label, direction, text)

    def _note(self, text):
        self._log("#", text)

    async def close(self, quit=True):
        """Say ``quit`` (when ``quit``) and close the connection."""
        if self._writer is not None and not self.closed and quit:
            try:
                self.send("quit")
                await self.read_quiet(quiet=0.3, timeout=2)
            except (ConnectionError, TelnetError):
                pass
        if self._writer is not None:
            self._writer.close()
        if self._pump_task is not None:
            self._pump_task.cancel()
            try:
                await self._pump_task
            except (asyncio.CancelledError, Exception):
                pass
        self._flush_partial()
        self.closed = True

    async def __aenter__(self):
        await self.connect()
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # ------------------------------------------------------------------ I/O

    def send(self, line):
        """
        Send one line (a command). Text received before it stays readable (use
        :meth:`discard` first to ignore it).

        Raises:
            TelnetError: if the connection is closed.
        """
        if self.closed or self._writer is None:
            raise TelnetError(f"{self.label}: connection closed")
        self._flush_partial()
        self._log(">", line)
        self._writer.write(line + "\r\n")
        # a quiet period counts from the question, not from the last answer
        self._last_data_at = time.monotonic()

    def discard(self):
        """Mark everything received so far as read; returns that text."""
        text = self.received[self._read_pos :]
        self._read_pos = len(self.received)
        return text

    async def read_until(self, pattern, timeout=30.0):
        """
        Read until ``pattern`` (a regex string or compiled pattern, searched in ANSI-stripped
        text) appears in what was received since the last read.

        Returns:
            tuple[re.Match | None, str]: the match (None on timeout or closed connection) and
            the text consumed: up to the end of the line holding the match, or everything
            received if there was no match.
        """
        rx = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = rx.search(self.received, self._read_pos)
            if match:
                end = self.received.find("\n", match.end())
                end = len(self.received) if end == -1 else end + 1
                text = self.received[self._read_pos : end]
                self._read_pos = end
                return match, text
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed:
                return None, self.discard()
            self._new_data.clear()
            try:
                await asyncio.wait_for(self._new_data.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def read_quiet(self, quiet=1.0, timeout=10.0):
        """
        Read until nothing has arrived for ``quiet`` seconds (or ``timeout`` s have passed);
        the quiet period counts from the last text received or the last line sent.

        Returns:
            str: the text received since the last read.
        """
        deadline = time.monotonic() + timeout
        while not self.closed:
            now = time.monotonic()
            wait = min(self._last_data_at + quiet - now, deadline - now)
            if wait <= 0:
                break
            self._new_data.clear()
            try:
                await asyncio.wait_for(self._new_data.wait(), wait)
            except asyncio.TimeoutError:
                pass
        return self.discard()

    async def command(self, line, until=None, timeout=30.0, quiet=0.6):
        """
        Send ``line`` and return the answer: the text up to the line matching ``until``, or
        (without ``until``) everything until the server is quiet for ``quiet`` seconds. Text
        received before sending is discarded (it is in the transcript already).

        Returns:
            str: the answer (ANSI stripped). With ``until``, an answer with no match after
            ``timeout`` seconds is returned as it is; check it with :meth:`expect` instead
            where a match is required.
        """
        self.discard()
        self.send(line)
        if until is None:
            return await self.read_quiet(quiet=quiet, timeout=timeout)
        _, text = await self.read_until(until, timeout=timeout)
        return text

    async def expect(self, line, until, timeout=30.0):
        """
        Like :meth:`command` with ``until``, but a missing match raises.

        Returns:
            tuple[re.Match, str]: the match and the answer text.

        Raises:
            TelnetError: no match within ``timeout`` seconds.
        """
        self.discard()
        self.send(line)
        match, text = await self.read_until(until, timeout=timeout)
        if not match:
            raise TelnetError(
                f"{self.label}: no {until!r} within {timeout} s after {line!r}; got {text!r}"
            )
        return match, text

    # ------------------------------------------------------------------ accounts

    async def create_account(self, name, password, timeout=30.0):
        """
        ``create <name> <password>`` and confirm Evennia 6's ``[Y]/N?`` question.

        Raises:
            TelnetError: if the account was not created (the server's message is included).
        """
        match, text = await self.expect(
            f"create {name} {password}", f"{CREATE_CONFIRM_RE}|{CREATE_FAIL_RE}", timeout
        )
        if not re.fullmatch(CREATE_CONFIRM_RE, match.group(0)):
            raise TelnetError(f"{self.label}: create {name} refused: {text!r}")
        match, text = await self.expect("y", f"{CREATE_OK_RE}|{CREATE_FAIL_RE}", timeout)
        if not re.match(CREATE_OK_RE, match.group(0)):
            raise TelnetError(f"{self.label}: create {name} failed: {text!r}")
        await self.read_quiet(quiet=0.3, timeout=3)

    async def login(self, name, password, create=False, timeout=30.0):
        """
        Log in with ``connect <name> <password>``; with ``create``, create the account first.

        Returns:
            str: what the server said on login (the first room's description).

        Raises:
            TelnetError: on a refused login or creation.
        """
        if create:
            await self.create_account(name, password, timeout=timeout)
        match, text = await self.expect(
            f"connect {name} {password}", f"{LOGIN_OK_RE}|{LOGIN_FAIL_RE}", timeout
        )
        if re.search(LOGIN_FAIL_RE, match.group(0)):
            raise TelnetError(f"{self.label}: login as {name} refused: {text!r}")
        return text + await self.read_quiet(quiet=0.5, timeout=5)
