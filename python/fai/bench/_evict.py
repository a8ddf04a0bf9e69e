"""Caches emptied between timed calls (python -m fai.bench --cold), as fai bench --cold does: a
decode step reads its K/V once, and a serving engine's cache does not stay in any cache level
from one step to the next, while a benchmark that calls the same step again finds what the last
call left in a large last-level cache (some machines report hundreds of MiB)."""
import numpy as np

import fai

_MIN_BYTES = 1 << 30
_LINE = 64


class Evictor:
    """A buffer of at least 1 GiB and twice the L2 and L3 fai reports, touched once now; each
    call reads a byte of every 64-byte line of it."""

    def __init__(self):
        size = max([_MIN_BYTES] + [2 * fai.cpu_cache_bytes(level) for level in (2, 3)])
        self.bytes = (size + 4095) // 4096 * 4096
        self._buffer = np.ones(self.bytes, np.uint8)

    def __call__(self):
        return int(self._buffer[::_LINE].sum(dtype=np.uint64))
