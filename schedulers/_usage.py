"""What one run of ``fn`` used: CPU seconds, peak resident memory, JAX's GPU peak bytes.

Every scheduler measures with `Meter`, in the process that runs ``fn``, around the call only::

    meter = Meter()
    with meter:
        value = fn(item)
    meter.usage  # {"cpu_s": 0.31, "peak_rss_bytes": 228589568}

- ``cpu_s``: user + system CPU seconds of the whole process (every thread) while ``fn`` ran
  (`time.process_time`), to the microsecond.
- ``peak_rss_bytes``: the process's resident-memory high-water mark (``VmHWM`` of
  ``/proc/self/status``) after it was reset to the current resident size by writing ``5`` to
  ``/proc/self/clear_refs`` before ``fn``: the peak while ``fn`` ran, the memory the process held
  before included. Absent where that file cannot be written (not Linux, a kernel before 4.0).
- ``gpu_peak_bytes``: only when JAX is imported after ``fn`` (by ``fn`` or an earlier task; this
  module never imports it), its backends are initialized and its default backend is a GPU: the
  largest ``peak_bytes_in_use`` of ``memory_stats()`` over the process's local devices. JAX
  offers no way to reset that peak, so it is the peak since the process started: this task's,
  or an earlier task's in the same process if that was higher. Absent otherwise (JAX on CPU, a
  device whose ``memory_stats()`` is None).

The cost per task is one ``write`` to a file kept open, one ``pread`` of another (the kernel
writes the whole status text: most of the cost), two CPU-clock reads, and with JAX imported a
few calls into it: about 20 us on a 2-core VM (files reopened after a ``fork``). Where several
tasks run at once in one process (a dask worker with several threads), the figures are the
process's: they cover every task that ran meanwhile.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

#: The fields of a usage, as the ledger records them (docs/ledger.md).
CPU, PEAK_RSS, GPU_PEAK = FIELDS = ("cpu_s", "peak_rss_bytes", "gpu_peak_bytes")
#: The platform names JAX gives a GPU device.
_GPU_PLATFORMS = frozenset({"gpu", "cuda", "rocm"})


class _Proc:
    """This process's ``/proc/self/clear_refs`` and ``/proc/self/status``, opened once per pid
    (a forked child opens its own: the parent's descriptors name the parent)."""

    pid = -1
    clear_refs: int | None = None
    status: int | None = None

    @classmethod
    def files(cls) -> tuple[int | None, int | None]:
        if cls.pid != os.getpid():
            cls.pid = os.getpid()
            cls.clear_refs = _open("/proc/self/clear_refs", os.O_WRONLY)
            cls.status = _open("/proc/self/status", os.O_RDONLY) if cls.clear_refs else None
        return cls.clear_refs, cls.status


def _open(path: str, flags: int) -> int | None:
    try:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def _reset_peak() -> bool:
    """Reset the resident-memory high-water mark; False where it cannot be."""
    clear_refs, status = _Proc.files()
    if clear_refs is None or status is None:
        return False
    try:
        os.write(clear_refs, b"5")
    except OSError:
        return False
    return True


def _peak_rss() -> int | None:
    """``VmHWM`` in bytes, or None where it cannot be read."""
    status = _Proc.status
    if status is None:
        return None
    try:
        text = os.pread(status, 8192, 0)
        at = text.index(b"VmHWM:") + 6
        return int(text[at:text.index(b"kB", at)]) * 1024
    except (OSError, ValueError):
        return None


def gpu_peak_bytes() -> int | None:
    """The largest ``peak_bytes_in_use`` over JAX's local GPU devices; None when JAX is not
    imported, has not started its backends (asking would start them, and on a GPU take most of
    its memory), runs on CPU, or reports no memory statistics."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    # No public call says whether the backends are up without starting them: ask the module
    # that owns them, and measure nothing where it says nothing (another JAX version).
    bridge = sys.modules.get("jax._src.xla_bridge")
    initialized = getattr(bridge, "backends_are_initialized", None)
    try:
        if initialized is None or not initialized() or jax.default_backend() not in _GPU_PLATFORMS:
            return None
        peaks = []
        for device in jax.local_devices():
            stats = device.memory_stats() if device.platform in _GPU_PLATFORMS else None
            if stats and isinstance(stats.get("peak_bytes_in_use"), int):
                peaks.append(stats["peak_bytes_in_use"])
    except Exception:  # noqa: BLE001 -- a broken backend is fn's business, not ours
        return None
    return max(peaks) if peaks else None


class Meter:
    """Measures one run of ``fn``: use as ``with meter: fn(item)``, then read `usage`.

    `usage` is a dict of the `FIELDS` that could be measured (``cpu_s`` always), set on exit
    whether ``fn`` returned or raised. One meter may be used again for the next task.
    """

    __slots__ = ("_cpu", "_rss", "usage")

    def __init__(self) -> None:
        self.usage: dict[str, Any] = {}
        self._cpu = 0.0
        self._rss = False

    def __enter__(self) -> Meter:
        self._rss = _reset_peak()
        self._cpu = time.process_time()
        return self

    def __exit__(self, *exc: Any) -> None:
        # to the microsecond: the clock's noise is coarser, and the ledger keeps it shorter
        usage: dict[str, Any] = {CPU: round(max(0.0, time.process_time() - self._cpu), 6)}
        if self._rss:
            peak = _peak_rss()
            if peak is not None:
                usage[PEAK_RSS] = peak
        if "jax" in sys.modules:
            gpu = gpu_peak_bytes()
            if gpu is not None:
                usage[GPU_PEAK] = gpu
        self.usage = usage


def combined(usages: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The usage of one task run by several processes (a device group of several): their CPU
    seconds summed, the largest of their peaks. None when none was measured."""
    measured = [u for u in usages if u]
    if not measured:
        return None
    if len(measured) == 1:
        return measured[0]
    total: dict[str, Any] = {}
    for usage in measured:
        for key, value in usage.items():
            total[key] = total.get(key, 0) + value if key == CPU else max(total.get(key, 0), value)
    return total
