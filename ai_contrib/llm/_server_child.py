"""
The embedded model server's child process: llama.cpp's OpenAI-compatible server via ``xllamacpp``.

Run as a script (``python _server_child.py '<config JSON>'``) by :mod:`ai_contrib.llm.embedded`;
it imports only the standard library and ``xllamacpp``, never ``ai_contrib`` or Django.

Protocol with the parent:

- argv[1]: JSON ``{"model_path": str, "n_ctx": int (tokens per slot, 0 = the model's own),
  "slots": int (requests served at once), "threads": int (generation),
  "batch_threads": int (prompt evaluation, default ``threads``), "n_batch": int (prompt
  tokens evaluated in one step, llama.cpp's ``n_batch``; default llama.cpp's), "flash_attn":
  "off" | "on" |
  "auto" (llama.cpp's flash attention, default "auto"), "nice": int (added to the
  process's scheduling niceness, default 0), "slot_save_path": str (a directory that slot
  caches are saved to and restored from, and ``GET /slots``; default none), "parent_pid": int}``;
- environment ``AI_EMBEDDED_API_KEY``: the API key the server demands (passed this way so it never
  shows in ``ps`` output or on stdout);
- stdout: exactly one JSON line once the server listens: ``{"base_url":
  "http://127.0.0.1:PORT/v1", "pid": int}``;
- stderr: diagnostics; the parent keeps the tail for its error messages;
- stdin: the lifeline. The child serves until stdin reaches end-of-file (the parent closed it, or
  the parent died), then exits. On Linux ``PR_SET_PDEATHSIG`` also kills it when the parent dies,
  e.g. after ``kill -9`` of the game server, which would otherwise orphan it holding its port.

Exit codes: 0 after stdin closed; 2 model file missing; 3 ``xllamacpp`` missing; 4 the server
failed to start; 5 the parent was already gone.

Design source (``docs/design.md``, "The embedded model", "In a child process"): in-process the
server's constructor holds the GIL (a reactor stall) and leaks on re-creation; a child process
starts in ~0.35 s with no stall. ``Server(params)`` blocks until ready; calling
``handle_metrics()`` right after creation avoids a hang seen when a server is deleted soon after;
there is no ``stop()``, so the child leaves with ``os._exit``.
"""

from __future__ import annotations

import json
import os
import sys

API_KEY_ENV = "AI_EMBEDDED_API_KEY"


def _die_with_parent(parent_pid):
    """Ask Linux to SIGTERM this process when its parent dies; exit if the parent is gone already."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except Exception:  # no prctl: the stdin lifeline still works
            pass
    if parent_pid and os.getppid() != parent_pid:
        sys.stderr.write("embedded model server: parent process already gone\n")
        sys.stderr.flush()
        os._exit(5)


#: ``config["flash_attn"]`` -> llama.cpp's ``llama_flash_attn_type`` value
FLASH_ATTN_TYPES = {"auto": -1, "off": 0, "on": 1}


def _slot_files(params, directory):
    """Let the server save slot caches to files in ``directory`` and restore them (and list its
    slots): a cache warm-up evaluated by the memory server is restored into a slot of the reply
    server, which has the same layout (docs/design.md, "Warm-ups handed over")."""
    if not directory:
        return
    params.slot_save_path = os.path.join(directory, "")  # llama.cpp joins path and name
    if hasattr(params, "endpoint_slots"):
        params.endpoint_slots = True  # GET /slots: which slot is idle


def main(argv) -> int:
    config = json.loads(argv[1])
    _die_with_parent(config.get("parent_pid"))

    if int(config.get("nice", 0)) > 0:
        os.nice(int(config["nice"]))  # before the server's threads start: they inherit it
    model_path = config["model_path"]
    if not os.path.isfile(model_path):
        sys.stderr.write(f"embedded model server: model file not found: {model_path}\n")
        return 2
    try:
        import xllamacpp
    except ImportError as err:
        sys.stderr.write(
            f"embedded model server: cannot import xllamacpp ({err}); "
            "pip install 'evennia-ai-contrib[embedded]'\n"
        )
        return 3

    params = xllamacpp.CommonParams()
    params.model.path = model_path
    # each slot (a request served at once) has its own n_ctx window and its own prompt cache, so
    # a reply never queues behind a long summary and the summary does not evict the reply's
    # cached prefix
    slots = max(1, int(config.get("slots", 1)))
    params.n_ctx = int(config.get("n_ctx", 0)) * slots
    params.n_parallel = slots
    if hasattr(params, "kv_unified"):
        params.kv_unified = False  # a fixed n_ctx per slot, as the NPC's budget assumes
    if hasattr(params, "slot_prompt_similarity"):
        # a request goes to the idle slot whose cached prompt shares the longest prefix with it
        # when that prefix is at least this share of the prompt, else to the least recently
        # used slot. llama.cpp's 10 % sent the first reply after a compaction (only the persona
        # in common: ~8 %) to the other slot, and the NPC's cache then alternated between the two
        params.slot_prompt_similarity = 0.01
    if config.get("n_batch"):
        # the server takes a new request, and drops a cancelled one, only between steps of this
        # many prompt tokens: the client weighs a cancel against it
        params.n_batch = int(config["n_batch"])
    threads = int(config.get("threads", 1))
    params.cpuparams.n_threads = threads
    # prompt evaluation is compute-bound and scales with cores; generation is memory-bound and
    # collapses with two threads on a busy machine, so the two are set apart
    params.cpuparams_batch.n_threads = max(1, int(config.get("batch_threads") or threads))
    if hasattr(params, "flash_attn_type"):
        params.flash_attn_type = FLASH_ATTN_TYPES[config.get("flash_attn", "auto")]
    elif config.get("flash_attn", "auto") != "auto":
        sys.stderr.write("embedded model server: this xllamacpp cannot set flash attention; "
                         "llama.cpp chooses\n")
    _slot_files(params, config.get("slot_save_path"))
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # a free port
    api_key = os.environ.get(API_KEY_ENV)
    if api_key:
        params.api_keys = [api_key]
    params.verbosity = 0
    # llama.cpp's prompt cache defaults to 8 GiB; an NPC server needs a small one
    if hasattr(params, "cache_ram_mib"):
        params.cache_ram_mib = int(config.get("cache_ram_mib", 256))
    try:
        server = xllamacpp.Server(params)  # blocks until the model is loaded and the port listens
        server.handle_metrics()  # avoids the hang seen when a fresh server is torn down
    except Exception as err:  # a taken port or a bad model only give a generic RuntimeError
        sys.stderr.write(f"embedded model server: failed to start: {err!r}\n")
        return 4

    address = str(server.listening_address).rstrip("/")
    sys.stdout.write(json.dumps({"base_url": f"{address}/v1", "pid": os.getpid()}) + "\n")
    sys.stdout.flush()

    # serve until the parent closes stdin (or dies); read() returns at end-of-file
    try:
        while sys.stdin.buffer.read(65536):
            pass
    except (OSError, KeyboardInterrupt):
        pass
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: deleting the server object can hang
