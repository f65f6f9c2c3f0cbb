"""Precompiling a workload's configs before timing: pool workers call each family launch's
``warmup``, which fills Triton's on-disk cache; the measuring process then loads each kernel
from there. Workers see tensors only through their shapes, strides and dtypes (empty CPU
tensors): Triton specializes on sizes, strides and 16-byte pointer alignment, all of which
match.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from typing import Any

from costtune.build.errors import CompileResult, classify_error, error_text
from costtune.build.pool import PendingCompiles, get_pool
from costtune.types import Config, Status, Workload


def tensor_specs(inputs: dict[str, Any]) -> dict[str, Any]:
    """Shape, stride and dtype of each input tensor (what a compile worker needs to rebuild it);
    non-tensor inputs (flags, scalars) pass through as they are."""
    import torch

    return {k: ("tensor", tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch."))
            if isinstance(t, torch.Tensor) else ("value", t) for k, t in inputs.items()}


def rebuild_inputs(specs: dict[str, Any]) -> dict[str, Any]:
    """Empty CPU tensors with the specs' shapes and strides (untouched pages cost nothing)."""
    import torch

    return {k: torch.empty_strided(s[1], s[2], dtype=getattr(torch, s[3])) if s[0] == "tensor"
            else s[1] for k, s in specs.items()}


def compile_config(kernel: str, specs: dict[str, tuple], config: dict[str, Any]) -> CompileResult:
    """Compile one config in this process (a pool worker) through the launches of ``kernel``
    (an implementation name, ``costtune.kernels.IMPLEMENTATIONS``).

    Under a host-wide lock per (kernel, config, specialization): GPU workers of one host that
    need the same kernel at once compile it once, the others wait and load it from Triton's
    disk cache (the seconds reported start after the wait)."""
    from costtune.kernels import get_implementation

    family = get_implementation(kernel)
    inputs = rebuild_inputs(specs)
    with compile_lock(kernel, specs, config):
        start = time.perf_counter()
        try:
            for call in family.kernel_calls(inputs, Config.from_dict(config)):
                call.warmup()
        except Exception as exc:  # every compile failure becomes a row
            return CompileResult(classify_error(exc), time.perf_counter() - start,
                                 error_text(exc))
    return CompileResult(Status.OK, time.perf_counter() - start)


def specialization_key(kernel: str, specs: dict[str, tuple], config: dict[str, Any]) -> str:
    """A hash that two compiles share when Triton likely compiles the same kernels for them:
    the config, dtypes, and for every size, stride and int how Triton specializes it (equal to
    1, divisible by 16, other). It can differ from Triton's own key either way (it ignores the
    int width and the GPU; it tells floats apart by value): a shared key only makes one compile
    wait for the other, a split one only compiles twice."""
    def cls(v: Any) -> str:
        if isinstance(v, bool) or not isinstance(v, int):
            return repr(v)
        return "1" if v == 1 else "16" if v % 16 == 0 else "x"

    parts = [kernel, repr(sorted(config.items()))]
    for name, spec in sorted(specs.items()):
        if spec[0] == "tensor":
            parts.append(f"{name}:{spec[3]}:{[cls(d) for d in spec[1]]}:"
                         f"{[cls(d) for d in spec[2]]}")
        else:
            parts.append(f"{name}={cls(spec[1])}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


LOCK_WAIT_S = 300.0  # a holder stuck longer than this (a hung worker) is compiled around


@contextlib.contextmanager
def compile_lock(kernel: str, specs: dict[str, tuple], config: dict[str, Any], *,
                 wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the host-wide lock of this compile (an flock in Triton's cache directory, released
    by the OS if the holder dies), waiting at most ``wait_s``. When flock is missing, the cache
    is not writable, the file system refuses locks (NFS without locking) or the wait runs out,
    the compile goes ahead unlocked: the lock only saves duplicate work."""
    try:
        import fcntl

        from triton import knobs

        folder = os.path.join(knobs.cache.dir, "costtune-locks")
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, specialization_key(kernel, specs, config)),
                     os.O_CREAT | os.O_RDWR, 0o644)
    except (ImportError, OSError):
        yield
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # held by another compile of the same kernel
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            except OSError:  # the file system does not lock (ENOLCK, ENOSYS, ...)
                break
        yield
    finally:
        os.close(fd)  # closing releases the flock


def submit_compiles(workload: Workload, configs: list[Config], inputs: dict[str, Any], *,
                    workers: int | None = None, timeout_s: float = 300.0) -> PendingCompiles:
    """Start compiling every config of ``workload`` on ``workers`` processes (default: all
    cores), in the order given; returns at once. ``workers=0`` compiles here, before returning
    (no pool), which is what a CPU test can afford. A compile still running ``timeout_s`` after
    submission is a TIMEOUT."""
    specs = tensor_specs(inputs)
    if workers == 0:
        return PendingCompiles({c.key: compile_config(workload.implementation, specs, c.as_dict())
                                for c in configs}, timeout_s)
    pool = get_pool(workers)
    return PendingCompiles({c.key: pool.submit(compile_config, workload.implementation, specs,
                                               c.as_dict()) for c in configs}, timeout_s)


def precompile(workload: Workload, configs: list[Config], inputs: dict[str, Any], *,
               workers: int | None = None, timeout_s: float = 300.0) -> dict[str, CompileResult]:
    """Compile every config of ``workload`` on ``workers`` processes (default: all cores) and
    wait for all of them.

    Returns ``{config.key: CompileResult}``; a compile outliving ``timeout_s`` is a TIMEOUT row.
    ``workers=0`` compiles in this process (no pool), which is what a CPU test can afford.
    """
    pending = submit_compiles(workload, configs, inputs, workers=workers, timeout_s=timeout_s)
    return {c.key: pending.get(c) for c in configs}
