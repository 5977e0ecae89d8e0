"""
Run a real Evennia game made from ``game_template/``: create, start, stop, kill, read logs.

Used by the demo (``python -m demo``) and the end-to-end tests. Every game gets its own directory,
its own SQLite database and its own block of seven loopback ports (``EVENNIA_PORT_BASE``, see
``game_template/server/conf/settings.py``), so several can run side by side.

Facts this relies on (Evennia 6.1, measured):

- ``evennia --init`` always copies Evennia's own template, so a game is made by copying
  ``game_template/`` and running ``evennia --initmissing`` (secret settings, log dir) and
  ``evennia migrate`` (the SQLite database) inside the copy.
- ``evennia start`` with ``EVENNIA_SUPERUSER_USERNAME``/``EVENNIA_SUPERUSER_PASSWORD`` in the
  environment and stdin at /dev/null creates the superuser without a prompt. The launcher returns
  once the Portal and Server run; on the very first start the Server runs the initial setup and then
  restarts itself once, so readiness is judged from the server log and a telnet probe, not
  from the launcher.
- ``evennia`` runs ``twistd`` from ``PATH``: the virtualenv's ``bin`` is put first on it.
- The Server's pid is in ``server/server.pid`` and the Portal's in ``server/portal.pid``.
"""

import importlib.util
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIR = REPO_ROOT / "game_template"

#: ports used per game: telnet base, web base+1, websocket base+2, internal web base+5, AMP base+6
PORT_SPAN = 7
#: where the settings of a game made by :meth:`GameDir.create` are remembered (ports, environment)
STATE_FILE = "gamectl.json"

DEFAULT_SUPERUSER = ("admin", "admin-password-123")

# Files that a template used in place (someone ran `evennia start` inside game_template/) would
# have grown; a fresh game must not inherit them.
_TEMPLATE_IGNORE = shutil.ignore_patterns(
    "__pycache__",
    "*.py[cod]",
    "secret_settings.py",
    "*.db3",
    "*.db3-journal",
    "*.pid",
    "*.restart",
    "*.log",
    "*.log.*",
    ".static",
    ".media",
    "ai_archive",
    "ai_memory",
    STATE_FILE,
)

_LAUNCHER_ERROR_RE = re.compile(r"^\s*ERROR:|^Traceback \(most recent call last\)", re.M)
_SERVER_RESET_RE = re.compile(r"Evennia Server successfully restarted in 'reset' mode")
_FIRST_START_RESTART_RE = re.compile(r"Initial setup complete\. Restarting Server once\.")


class GameError(RuntimeError):
    """A game command failed or the game did not reach the expected state in time."""


def _port_free(port, host="127.0.0.1"):
    """True if nothing listens on ``host:port`` and we could bind it now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def find_free_port_base(span=PORT_SPAN, low=20000, high=60000, attempts=300):
    """
    Pick a port base whose ``span`` consecutive ports are all free on 127.0.0.1.

    Another process may take a port between this check and the game's start; the risk is small
    with a random base in a wide range, and a clash shows as a failed start.

    Returns:
        int: the base port.

    Raises:
        GameError: if no free block was found in ``attempts`` random tries.
    """
    for _ in range(attempts):
        base = random.randrange(low, high - span)
        if all(_port_free(base + i) for i in range(span)):
            return base
    raise GameError(f"no block of {span} free ports found in {low}-{high}")


def port_accepts(port, host="127.0.0.1", timeout=1.0):
    """True if a TCP connection to ``host:port`` succeeds within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _pid_alive(pid):
    """True if process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True


def _evennia_root():
    """The directory holding the ``evennia`` package (what its launcher calls EVENNIA_ROOT)."""
    spec = importlib.util.find_spec("evennia")
    return str(Path(spec.origin).resolve().parent.parent)


def evennia_command():
    """
    The ``evennia`` launcher of the running interpreter's environment, as an argv prefix.

    Returns:
        list[str]: e.g. ``["/repo/.venv/bin/evennia"]``, or ``[python, "-m", "evennia"]`` where no
        script is installed beside the interpreter.
    """
    script = Path(sys.executable).parent / "evennia"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "evennia"]


@dataclass
class Ports:
    """
    The loopback ports of one game, derived from its base (what the template's settings do with
    ``EVENNIA_PORT_BASE``): telnet = base, web = base+1, websocket = base+2, the Server's
    internal web port = base+5, AMP (Portal <-> Server) = base+6.
    """

    base: int

    @property
    def telnet(self):
        """Telnet port for players (int)."""
        return self.base

    @property
    def web(self):
        """Web site and web client port (int): ``http://127.0.0.1:<web>/webclient``."""
        return self.base + 1

    @property
    def websocket(self):
        """The web client's websocket port (int)."""
        return self.base + 2

    @property
    def internal_web(self):
        """The Server's own web port behind the Portal's proxy (int)."""
        return self.base + 5

    @property
    def amp(self):
        """The Portal's AMP port, which the Server and the ``evennia`` launcher talk to (int)."""
        return self.base + 6


class GameDir:
    """
    One Evennia game directory made from ``game_template/``, and its server processes.

    Args:
        path (str | Path): the game dir (holding ``server/conf/settings.py``).
        port_base (int): the ``EVENNIA_PORT_BASE`` of this game (see :class:`Ports`).
        env (dict[str, str] | None): extra environment for every ``evennia`` call, e.g.
            ``{"AI_MAX_CONTEXT_TOKENS": "1500"}``; the settings read ``AI_*`` variables at start.
        superuser (tuple[str, str]): name and password of the superuser (Account #1) created on
            the first start.

    Use :meth:`create` for a new game, :meth:`open` for one made earlier.
    """

    def __init__(self, path, port_base, env=None, superuser=DEFAULT_SUPERUSER):
        self.path = Path(path).resolve()
        self.ports = Ports(int(port_base))
        self.extra_env = dict(env or {})
        self.superuser = tuple(superuser)

    # ----------------------------------------------------------------- creation

    @classmethod
    def create(
        cls,
        target,
        template=TEMPLATE_DIR,
        port_base=None,
        env=None,
        superuser=DEFAULT_SUPERUSER,
        replace=True,
        migrate=True,
    ):
        """
        Make a fresh game at ``target``: copy the template, ``--initmissing``, ``migrate``.

        Args:
            target (str | Path): directory to create. If it exists and ``replace`` is true, a game
                still running there is stopped (or killed) and the directory removed first.
            template (str | Path): the game dir to copy (default: the repository's
                ``game_template/``).
            port_base (int | None): ``EVENNIA_PORT_BASE``; None picks a free block.
            env (dict | None): extra environment, see the class docstring.
            superuser (tuple[str, str]): see the class docstring.
            replace (bool): remove an existing ``target``; if false, an existing target raises.
            migrate (bool): create the database now (about 5-10 s) rather than on first start.

        Returns:
            GameDir: the new game, not started. Its ports and environment are saved in
            ``<target>/gamectl.json`` so :meth:`open` (and a later ``stop``) can find them.

        Raises:
            GameError: if ``target`` exists and ``replace`` is false, or an ``evennia`` step fails.
        """
        target = Path(target).resolve()
        if target.exists():
            if not replace:
                raise GameError(f"{target} already exists")
            cls._retire(target)
            shutil.rmtree(target)
        shutil.copytree(template, target, ignore=_TEMPLATE_IGNORE)
        game = cls(
            target,
            port_base if port_base is not None else find_free_port_base(),
            env=env,
            superuser=superuser,
        )
        game._save_state()
        game.evennia("--initmissing", timeout=120)
        if migrate:
            game.evennia("migrate", timeout=300)
        return game

    @classmethod
    def open(cls, path):
        """
        A game made earlier by :meth:`create`, with the ports and environment saved then.

        Raises:
            GameError: if ``path`` has no ``gamectl.json``.
        """
        state_file = Path(path) / STATE_FILE
        if not state_file.exists():
            raise GameError(f"{path} was not made by gamectl (no {STATE_FILE})")
        state = json.loads(state_file.read_text())
        return cls(path, state["port_base"], env=state.get("env"), superuser=state["superuser"])

    @classmethod
    def _retire(cls, path):
        """Stop (else kill) a game still running in ``path`` before its directory goes away."""
        try:
            old = cls.open(path)
        except GameError:
            return
        if old.server_pid() is None and old.portal_pid() is None:
            return
        old.retire(timeout=30)

    def _save_state(self):
        (self.path / STATE_FILE).write_text(
            json.dumps(
                {
                    "port_base": self.ports.base,
                    "env": self.extra_env,
                    "superuser": list(self.superuser),
                },
                indent=2,
            )
        )

    # ----------------------------------------------------------------- running evennia

    def env(self, **overrides):
        """
        The environment for ``evennia`` and the server processes it starts.

        The parent's variables pass through (a user's ``AI_LLM_BASE_URL`` keeps working), except
        ``DJANGO_SETTINGS_MODULE`` (pytest-django sets it to the test settings, which would replace
        the game's). The repository root goes first on ``PYTHONPATH``, then this game's port base,
        superuser and extra variables, then ``overrides``.

        Returns:
            dict[str, str]
        """
        env = dict(os.environ)
        env.pop("DJANGO_SETTINGS_MODULE", None)
        bindir = str(Path(sys.executable).parent)
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        # The game runs this checkout's ai_contrib, installed or not. The launcher overwrites
        # sys.path[1] (the first PYTHONPATH entry) with Evennia's root, so that goes first.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_evennia_root(), str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env["EVENNIA_PORT_BASE"] = str(self.ports.base)
        env["EVENNIA_SUPERUSER_USERNAME"] = self.superuser[0]
        env["EVENNIA_SUPERUSER_PASSWORD"] = self.superuser[1]
        env["PYTHONUNBUFFERED"] = "1"
        env.update({k: str(v) for k, v in self.extra_env.items()})
        env.update({k: str(v) for k, v in overrides.items()})
        return env

    def evennia(self, *args, timeout=120, check=True):
        """
        Run ``evennia <args>`` in the game dir, stdin at /dev/null, output captured.

        Args:
            *args (str): launcher arguments, e.g. ``"migrate"``.
            timeout (float): seconds before the launcher is killed and GameError raised.
            check (bool): raise GameError on a non-zero exit status.

        Returns:
            subprocess.CompletedProcess: with ``stdout`` (str; stderr merged into it).
        """
        cmd = evennia_command() + list(args)
        try:
            proc = subprocess.run(
                cmd,
                cwd=self.path,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as err:
            raise GameError(
                f"`evennia {' '.join(args)}` did not finish in {timeout} s:\n{err.stdout or ''}"
            ) from None
        self._append_launcher_log(args, proc.stdout)
        # the launcher exits with status 0 after printing most of its errors
        if check and (proc.returncode != 0 or _LAUNCHER_ERROR_RE.search(proc.stdout)):
            raise GameError(
                f"`evennia {' '.join(args)}` failed (exit {proc.returncode}):\n{proc.stdout}"
            )
        return proc

    def _append_launcher_log(self, args, output):
        logdir = self.path / "server" / "logs"
        if logdir.is_dir():
            with open(logdir / "launcher.log", "a") as fh:
                fh.write(f"$ evennia {' '.join(args)}\n{output}\n")

    # ----------------------------------------------------------------- start / stop / kill

    def start(self, timeout=180):
        """
        Start Portal and Server and wait until the game greets telnet players.

        Ready means: the launcher returned; on the very first start, the server log shows the one
        automatic restart that follows the initial setup and the restarted Server; and a telnet
        connection receives the connection screen (which the Server, not the Portal, sends).
        The log alone is not enough: a Server restarted after a crash logs no "started" line.

        Args:
            timeout (float): seconds for all of it.

        Returns:
            float: the seconds it took.

        Raises:
            GameError: on a launcher failure, or if the game is not ready in time (the message ends
                with the tail of the server log).
        """
        t0 = time.monotonic()
        first_start = "Initial setup complete" not in self.read_log("server")
        log_offset = self.log_size("server")
        self.evennia("start", timeout=timeout)
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.server_pid() is None and self.portal_pid() is None:
                time.sleep(0.5)
                if self.server_pid() is None and self.portal_pid() is None:
                    raise GameError("Evennia exited during start:\n" + self.log_tail("server"))
            setup_done = not first_start or self._restarted_after_setup(log_offset)
            if setup_done and self.greets(timeout=min(5.0, max(0.5, deadline - time.monotonic()))):
                return time.monotonic() - t0
            time.sleep(0.25)
        raise GameError(
            f"game at {self.path} not ready after {timeout} s; server log tail:\n"
            + self.log_tail("server")
        )

    def _restarted_after_setup(self, offset):
        """True if the server log after ``offset`` shows the post-setup restart completed."""
        new_log = self.read_log("server", offset=offset)
        restarts = [m.end() for m in _FIRST_START_RESTART_RE.finditer(new_log)]
        # the first process logs "started" before its planned restart takes effect
        return bool(restarts) and _SERVER_RESET_RE.search(new_log, restarts[-1]) is not None

    def greets(self, timeout=5.0):
        """
        True if a telnet connection gets the connection screen within ``timeout`` seconds.

        A bare socket suffices: Evennia sends the screen without waiting for the client's answers
        to its telnet negotiation. The connection is closed before logging in.
        """
        deadline = time.monotonic() + timeout
        try:
            with socket.create_connection(
                ("127.0.0.1", self.ports.telnet), timeout=timeout
            ) as sock:
                sock.settimeout(0.25)
                data = b""
                while time.monotonic() < deadline:
                    try:
                        chunk = sock.recv(4096)
                    except socket.timeout:
                        continue
                    if not chunk:
                        return False
                    data += chunk
                    if b"connect" in data and b"create" in data:
                        return True
        except OSError:
            return False
        return False

    def stop(self, timeout=60):
        """
        ``evennia stop`` and wait until the Server and Portal processes are gone.

        Args:
            timeout (float): seconds to wait.

        Returns:
            float: the seconds it took.

        Raises:
            GameError: if either process is still alive after ``timeout``.
        """
        t0 = time.monotonic()
        deadline = t0 + timeout
        # A stop sent while the Server restarts (e.g. right after the first start) can leave the
        # Portal running ("Connection to Evennia timed out"): then it is sent once more.
        for attempt in (1, 2):
            self.evennia("stop", timeout=max(1.0, deadline - time.monotonic()), check=False)
            retry_at = time.monotonic() + (deadline - time.monotonic()) / 2
            while time.monotonic() < (retry_at if attempt == 1 else deadline):
                if self.server_pid() is None and self.portal_pid() is None:
                    return time.monotonic() - t0
                time.sleep(0.2)
        pids = [p for p in (self.server_pid(), self.portal_pid()) if p]
        raise GameError(f"Evennia processes {pids} still alive {timeout} s after `evennia stop`")

    def retire(self, timeout=60):
        """
        Stop the game (:meth:`stop`); if it will not stop in ``timeout`` seconds, kill the Server
        and the Portal. Never raises for a game that will not stop.

        Returns:
            bool: True if it stopped cleanly, False if it had to be killed.
        """
        try:
            self.stop(timeout=timeout)
            return True
        except GameError:
            for which in ("server", "portal"):
                try:
                    self.kill(which)
                except GameError:
                    pass  # retiring is best effort: the caller moves on either way
            return False

    def kill(self, which="server", timeout=120.0):
        """
        SIGKILL the Server (or Portal) process, as a crash would: no shutdown hooks run.

        Returns once the process is gone and the ports it listened on can be bound again, so a
        ``start`` right after cannot meet its own predecessor's sockets (a killed process that is
        slow to exit on a loaded machine keeps them).

        Args:
            which (str): "server" or "portal".
            timeout (float): seconds to wait for the process to end and its ports to be free.

        Returns:
            int | None: the pid killed, or None if none was running.

        Raises:
            GameError: if the process or its ports outlive ``timeout``.
        """
        pid = self.server_pid() if which == "server" else self.portal_pid()
        if pid is None:
            return None
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        ports = (
            [self.ports.internal_web]
            if which == "server"
            else [self.ports.telnet, self.ports.web, self.ports.websocket, self.ports.amp]
        )
        end = time.monotonic() + timeout
        while _pid_alive(pid) or not all(_port_free(port) for port in ports):
            if time.monotonic() > end:
                raise GameError(
                    f"the {which} (pid {pid}) or its ports outlived SIGKILL by {timeout} s")
            time.sleep(0.05)
        return pid

    def _pid_from(self, name):
        pidfile = self.path / "server" / f"{name}.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    def server_pid(self):
        """The pid of the running Server process (from ``server/server.pid``), or None."""
        return self._pid_from("server")

    def portal_pid(self):
        """The pid of the running Portal process (from ``server/portal.pid``), or None."""
        return self._pid_from("portal")

    def is_running(self):
        """True if the Server process runs."""
        return self.server_pid() is not None

    # ----------------------------------------------------------------- logs

    def log_path(self, name="server"):
        """Path of ``server/logs/<name>.log`` (name: server, portal, http_requests, launcher)."""
        return self.path / "server" / "logs" / f"{name}.log"

    def log_size(self, name="server"):
        """Current size of a log in bytes (0 if missing): an offset for :meth:`read_log`."""
        try:
            return self.log_path(name).stat().st_size
        except OSError:
            return 0

    def read_log(self, name="server", offset=0):
        """
        The text of a log from byte ``offset`` on ('' if missing). Evennia rotates a log past
        its size limit; an offset beyond the new file's end reads it all.
        """
        return self.read_new(name, offset, whole_lines=False)[0]

    def read_new(self, name="server", offset=0, whole_lines=True):
        """
        Like :meth:`read_log`, and also the byte offset where the text read ends.

        Args:
            whole_lines (bool): stop after the last complete line, so a line being written is
                read whole next time.

        Returns:
            tuple[str, int]: the text and the offset to pass next time to read only newer text.
        """
        path = self.log_path(name)
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                start = offset if offset <= size else 0
                fh.seek(start)
                data = fh.read()
        except OSError:
            return "", offset
        if whole_lines:
            data = data[: data.rfind(b"\n") + 1]
        return data.decode("utf-8", "replace"), start + len(data)

    def log_tail(self, name="server", lines=40):
        """The last ``lines`` lines of a log, as one string."""
        return "\n".join(self.read_log(name).splitlines()[-lines:])

    def wait_for_log(self, pattern, name="server", offset=0, timeout=60.0, poll=0.25):
        """
        Wait until ``pattern`` (a regex) appears in a log after byte ``offset``.

        Returns:
            re.Match | None: the first match, or None after ``timeout`` seconds.
        """
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = rx.search(self.read_log(name, offset=offset))
            if match or time.monotonic() >= deadline:
                return match
            time.sleep(poll)

    def __repr__(self):
        return f"GameDir({str(self.path)!r}, port_base={self.ports.base})"
