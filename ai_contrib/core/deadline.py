"""
Time limits that follow the work: how many tokens of a reply prompt the server must evaluate,
how long it may take, and which history window fits an allowance (``docs/design.md``, "Time
limits that follow the work").

A model server evaluates only what follows the prefix its cache holds (llama.cpp's slot cache,
vLLM's prefix cache, hosted APIs' cached tokens), at a speed the client measures
(:func:`ai_contrib.core.budget.updated_prompt_speed`). A flat time limit fails a slow server
that is doing the work (a cold 3,000-token prompt at 50 tokens/s on a loaded machine takes a
minute) exactly like a dead one. So a reply prompt whose new tokens would take longer than an
allowance is built from less, and the request's limit grows with the prompt the server may have
to evaluate, so that only a server that does not answer gets the fallback line.

Pure functions: the shell (:mod:`ai_contrib.npc.deadline`) supplies the prompts, the counts and
the speed.
"""

from __future__ import annotations


#: how much slower than measured the server may be before a reply to it is given up: the load
#: of a shared machine can rise between two measurements
DEADLINE_MARGIN = 2.0


def cached_messages(messages, previous) -> int:
    """
    How many leading chat messages of ``messages`` are those of ``previous`` (same role and
    content): what the server's cache holds of the new prompt when ``previous`` was the last
    prompt it evaluated for this NPC. Counted in whole messages, so it never says more than the
    cache holds.

    Args:
        messages (list[dict]): the prompt to send, ``{"role", "content"}`` chat messages.
        previous (list[dict] | None): the last prompt sent, or None (nothing known: a restart).

    Returns:
        int: messages, 0 .. ``len(messages)``.
    """
    same = 0
    for new, old in zip(messages, previous or ()):
        if new.get("role") != old.get("role") or new.get("content") != old.get("content"):
            break
        same += 1
    return same


def evaluation_tokens(messages, previous, sizes) -> int:
    """
    Tokens of ``messages`` the server must evaluate: those after the messages it holds from
    ``previous`` (:func:`cached_messages`).

    Args:
        messages (list[dict]): the prompt to send.
        previous (list[dict] | None): the last prompt sent (:func:`cached_messages`).
        sizes (list[int]): the tokens of each of ``messages``, same order (a reply prompt's
            from :func:`ai_contrib.core.prompts.assemble_sized_reply_prompt`, others' from
            :func:`ai_contrib.core.tokens.count_message_tokens`): nothing is counted here.

    Returns:
        int: tokens.
    """
    return sum(sizes[cached_messages(messages, previous):])


def after_step(tokens, done, step) -> float:
    """
    Tokens a request evaluating ``tokens`` prompt tokens, ``done`` of them evaluated so far,
    has left after the step under way, on a server that drops a cancelled request only between
    steps of ``step`` tokens (llama.cpp's ``n_batch``): all that a cancel now spares the server.
    The step under way always ends, so a request in its last step costs the server as much
    cancelled as finished, and its client keeps nothing of it (``docs/design.md``, "Warming the
    cache after a compaction").

    Args:
        tokens (int): the tokens the request evaluates.
        done (float): tokens evaluated so far (elapsed seconds times the prompt speed).
        step (int | None): tokens per step; None (unknown): every step is as small as can be,
            and all that is left may be spared.

    Returns:
        float: tokens, 0.0 in the last step.
    """
    done = max(0.0, float(done))
    if not step:
        return max(0.0, float(tokens) - done)
    step = int(step)
    return max(0.0, float(tokens) - (int(done) // step + 1) * step)


def reply_timeout(tokens, speed, base, margin=DEADLINE_MARGIN) -> float:
    """
    Seconds a reply request may take: ``base`` (``AI_LLM_TIMEOUT``, what a server that answers
    nothing is given) plus ``margin`` times the evaluation of ``tokens`` at ``speed``.

    Args:
        tokens (int): the prompt's tokens the server may have to evaluate (the whole prompt: its
            cache may have been taken by another prompt meanwhile).
        speed (float | None): the server's prompt speed in tokens/s; None (unknown): ``base``.
        base (float): seconds.
        margin (float): how much slower than ``speed`` the server may turn.

    Returns:
        float: seconds.
    """
    if not speed or speed <= 0:
        return float(base)
    return float(base) + float(margin) * max(0, int(tokens)) / float(speed)


def window_start(token_counts, allowance, last_start) -> int:
    """
    Where a history window of at most ``allowance`` tokens starts: the newest messages that fit,
    never after index ``last_start`` (the first line of the turn being answered, which the
    window always shows).

    Args:
        token_counts (list[int]): what each history message costs in a request, oldest first,
            its per-message overhead included (:func:`ai_contrib.core.tokens.
            count_message_tokens`, as the history's ledger counts it).
        allowance (int): tokens the window may take.
        last_start (int): the latest index the window may start at.

    Returns:
        int: index into the history, 0 .. ``last_start``.
    """
    start, used = len(token_counts), 0
    while start > 0 and used + token_counts[start - 1] <= allowance:
        start -= 1
        used += token_counts[start]
    return min(start, max(0, last_start))


def warm_up_steps(sizes, roles, held, step_tokens, notes=None) -> list:
    """
    Where a cache warm-up sent in steps ends each request: the prompt's leading messages, each
    request adding at most ``step_tokens`` to the one before, at least one message
    (``docs/design.md``, "Warm-ups in steps"). The server caches each
    request's prompt, so the next request evaluates only what it adds, and a reply that comes
    during the warm-up waits for one step, not for the whole prompt. No request ends with two
    assistant messages (llama.cpp refuses such a prompt), nor with a note: a note stands before
    the line it is anchored at, and a reply built on the leading messages the server holds
    shows it only with that line (:func:`held_head`). Such a step takes the next message too.

    Args:
        sizes (list[int]): the tokens of each message of the whole prompt, oldest first.
        roles (list[str]): the role of each message, same order.
        held (int): leading messages the server holds already (:func:`cached_messages`).
        step_tokens (int | None): tokens a request may add; None or 0: one request.
        notes (list[bool], optional): whether each message is a note (default none is).

    Returns:
        list[int]: message counts, increasing, the last ``len(sizes)``; empty when the server
        holds the whole prompt.

    Raises:
        ValueError: ``sizes`` and ``roles`` differ in length.
    """
    if len(sizes) != len(roles):
        raise ValueError(f"{len(sizes)} sizes for {len(roles)} roles")
    total = len(sizes)
    held = max(0, min(int(held), total))
    if held >= total:
        return []
    if not step_tokens or step_tokens <= 0:
        return [total]
    ends, end = [], held
    while end < total:
        start, added = end, 0
        while end < total and (end == start or added + sizes[end] <= step_tokens):
            added += sizes[end]
            end += 1
        while end < total and (end >= 2 and roles[end - 1] == roles[end - 2] == "assistant"
                               or notes and notes[end - 1]):
            end += 1
        ends.append(end)
    return ends


def held_head(history_ids, shown, held) -> str | None:
    """
    The last history message of the longest stretch at the start of the history whose messages
    the server holds: where a reply's window may end its head after a warm-up stopped part way
    (``docs/design.md``, "Warm-ups in steps"). A prompt shows the history in
    conversation order (a reply right after the line it answers, a line said while it was
    written after it), so the warm-up's leading messages may hold a message stored after one
    they do not: the head ends before the first message the prompt shows and the server does not
    hold.

    Args:
        history_ids (list[str]): the ids of the history, in storage order.
        shown (set[str]): the ids of the history messages the whole prompt shows.
        held (set[str]): the ids among them the server holds.

    Returns:
        str | None: an id of ``held``, or None when the server holds none of that stretch.
    """
    head = None
    for line in history_ids:
        if line in held:
            head = line
        elif line in shown:
            break
    return head


def grown_head(token_counts, head, tail_start, allowance) -> int:
    """
    How far a reply built on a held head (:func:`held_head`) may take the head on towards its
    tail, evaluating the messages in between once, so that the server holds them for the next
    replies: with players who speak without pause the warm-up moves only a step between two
    replies, about what the conversation grows by, and would never catch up alone
    (``docs/design.md``, "Warm-ups in steps").

    Args:
        token_counts (list[int]): what each history message costs, oldest first.
        head (int): the index of the held head's last message.
        tail_start (int): the index the reply's newest lines start at.
        allowance (int): tokens the reply may spend on the messages in between.

    Returns:
        int: the index of the head's new last message, ``head`` .. ``tail_start - 1``.
    """
    end, used = head, 0
    while end + 1 < tail_start and used + token_counts[end + 1] <= allowance:
        end += 1
        used += token_counts[end]
    return max(head, end)
