"""glibc malloc settings for processes that move megabyte-sized buffers (brokers, clients, benches).

By default glibc serves an allocation above its mmap threshold (128 KiB at start, adjusted as the
program frees such blocks, up to 32 MiB) with a fresh `mmap`, and returns it with `munmap` on free; it
also trims the heap top back to the OS above 128 KiB. A broker reading 1 MiB fetches and a client
receiving them allocate and free such a buffer per message, so every one of them costs page faults on
memory the kernel must zero: bench.fetch_rpc measured ~370 minor faults and ~1 ms of system CPU per MiB
in the broker that way, and 0 faults with the thresholds below, with fetch MB/s swinging between 500
and 1300 depending on which regime a run fell into. Keeping those buffers on the heap (threshold
64 MiB) and not trimming it after every free (256 MiB) makes the path steady.

Only glibc has `mallopt` with these parameters; elsewhere this does nothing and says so.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MIB = 1024 * 1024


def tune_allocator(mmap_threshold_bytes: int = 64 * MIB, trim_threshold_bytes: int = 256 * MIB) -> bool:
    """Apply the thresholds; True when glibc accepted both."""
    try:
        # The process's own symbols, libc's among them: finding libc by name (ctypes.util.find_library)
        # runs `ldconfig -p` in a child process, a cost every `minibroker` command paid at start.
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold_bytes) == 1) and bool(
        mallopt(M_TRIM_THRESHOLD, trim_threshold_bytes) == 1
    )
    if not ok:
        log.debug("mallopt refused the thresholds; keeping the allocator's defaults")
    return ok
