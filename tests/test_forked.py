"""build.forked: compile closures run in forked children, then here from Triton's disk cache;
whatever a child fails to do is done here, so nothing depends on the children."""

from __future__ import annotations

import os
import sys
import time

import pytest
import triton
import triton.language as tl

from costtune.build.forked import ForkCompiler, can_fork_compile

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux")
PARENT = os.getpid()


def in_child() -> bool:
    return os.getpid() != PARENT


def test_children_run_the_jobs_and_results_come_from_here(tmp_path):
    """Each closure runs once in a child (its side effect: a file named by the child's pid)
    and once here (its return value); shares are round-robin over the workers."""
    def job(i):
        def run():
            (tmp_path / f"{i}-{os.getpid()}").write_text("")
            return i * i
        return run

    with ForkCompiler(workers=3) as pool:
        futures = [pool.submit(job(i)) for i in range(7)]
        pool.start()
    assert [f.result() for f in futures] == [i * i for i in range(7)]
    pids = {}
    for path in tmp_path.iterdir():
        i, pid = map(int, path.name.split("-"))
        pids.setdefault(i, set()).add(pid)
    assert all(PARENT in pids[i] and len(pids[i]) == 2 for i in range(7))
    children = {p for s in pids.values() for p in s} - {PARENT}
    assert len(children) == 3 and pool.forked == 3 and pool.fork_s > 0
    assert pool.compiled_in_child == 7 and pool.ran_here == 0
    assert len(pool.child_seconds) == 7 and all(0 <= t < 10 for t in pool.child_seconds)


def test_sixteen_children_fork_each_other_and_leave_none_behind(tmp_path):
    """Child j forks j + 2**m: every job still runs in its own child, once, and every child
    is reaped (its parent waits for it) before the batch ends."""
    def job(i):
        def run():
            (tmp_path / f"{i}-{os.getpid()}-{os.getppid()}").write_text("")
            return i
        return run

    with ForkCompiler(workers=16) as pool:
        futures = [pool.submit(job(i)) for i in range(20)]
        pool.start()
    assert [f.result() for f in futures] == list(range(20))
    seen = [tuple(map(int, p.name.split("-"))) for p in tmp_path.iterdir()]
    in_children = [(i, pid, ppid) for i, pid, ppid in seen if pid != PARENT]
    assert sorted(i for i, *_ in in_children) == list(range(20))
    pids = {pid for _, pid, _ in in_children}
    assert len(pids) == 16 and pool.forked == 16 and pool.compiled_in_child == 20
    parents = {ppid for *_, ppid in in_children}
    assert PARENT in parents and len(parents) > 1  # most were forked by other children
    time.sleep(0.2)
    for pid in pids:  # reaped: gone, not zombies
        assert not os.path.exists(f"/proc/{pid}") or "Z" not in open(
            f"/proc/{pid}/stat").read().split()[2]


def test_forking_is_for_small_processes_with_triton_cache_on(monkeypatch):
    """Threads instead when Triton recompiles every time (the child's work would be done
    again here) or when this process holds more than the resident-memory bound."""
    from triton import knobs

    assert can_fork_compile()
    assert not can_fork_compile(max_resident=1)
    monkeypatch.setattr(knobs.compilation, "always_compile", True)
    assert not can_fork_compile()


def test_no_forking_under_torch_distributed_or_mpi(monkeypatch, tmp_path):
    """A process in a torch.distributed group (NCCL over RDMA in real jobs) or with MPI
    loaded compiles in threads."""
    import types

    import torch.distributed as dist

    assert can_fork_compile()
    monkeypatch.setitem(sys.modules, "mpi4py", types.ModuleType("mpi4py"))
    assert not can_fork_compile()
    monkeypatch.delitem(sys.modules, "mpi4py")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0,
                            world_size=1)
    try:
        assert not can_fork_compile()
    finally:
        dist.destroy_process_group()
    assert can_fork_compile()


def test_a_failing_job_fails_here_with_its_own_error():
    def bad():
        raise ValueError("no such config")

    with ForkCompiler(workers=2) as pool:
        futures = [pool.submit(bad), pool.submit(lambda: "fine")]
        pool.start()
    with pytest.raises(ValueError, match="no such config"):
        futures[0].result()
    assert futures[1].result() == "fine"
    assert pool.compiled_in_child == 1 and pool.ran_here == 1


def test_a_child_that_dies_or_stalls_is_replaced_here():
    """A child that exits without a word, or hangs past stall_s, is reaped (killed) and its
    jobs run here: the results are the same."""
    def dies():
        if in_child():
            os._exit(3)
        return "died there, ran here"

    def stalls():
        if in_child():
            time.sleep(60)
        return "stalled there, ran here"

    start = time.perf_counter()
    with ForkCompiler(workers=2, stall_s=1.0) as pool:
        futures = [pool.submit(dies), pool.submit(stalls), pool.submit(dies)]
        pool.start()
    assert [f.result() for f in futures] == ["died there, ran here", "stalled there, ran here",
                                             "died there, ran here"]
    assert time.perf_counter() - start < 20
    assert pool.ran_here == 3 and pool.compiled_in_child == 0


def test_jobs_never_started_still_resolve_and_late_ones_run_in_threads():
    with ForkCompiler(workers=2) as pool:
        early = pool.submit(lambda: 1)
    assert early.result() == 1  # shutdown started the batch
    late = pool.submit(lambda x: x + 1, 41)
    pool.shutdown()
    assert late.result() == 42


@triton.jit
def _scale(x, y, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=mask) * factor, mask=mask)


def _precompile_for_sm90(mode: str, cache_dir: str) -> list[tuple[str, bool]]:
    """In a JIT (not interpreter) process with a stand-in sm_90 driver: costtune's precompile
    of four configs through Triton's own warmup path; (kernel hash, this process's compile
    was a disk-cache hit) per config."""
    from types import SimpleNamespace

    import torch
    from helpers import use_stand_in_driver
    from triton import knobs
    from triton.runtime.jit import JITFunction

    import costtune.tune.precompile as module

    use_stand_in_driver()
    knobs.cache.dir = cache_dir
    hits: list[bool] = []
    knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
    module.can_precompile = lambda: True
    fn = JITFunction(_scale.fn if hasattr(_scale, "fn") else _scale)
    x = torch.empty(4096, device="meta", dtype=torch.float16)
    configs = [triton.Config({"BLOCK": b}, num_warps=4, num_stages=2)
               for b in (128, 256, 512, 1024)]
    outcomes: list = []
    counts = module.precompile(SimpleNamespace(fn=fn), configs,
                               named_args={"x": x, "y": x, "n": 4096, "factor": 2.0},
                               kwargs={"grid": (1,)}, mode=mode, outcomes=outcomes)
    assert counts == (4, 4) and outcomes == ["ok"] * 4, (counts, outcomes)
    kernels = list(fn.device_caches[0][0].values())
    assert len(hits) == len(kernels) == 4
    return [(k.hash, hit) for k, hit in zip(kernels, hits)]


def test_precompile_in_processes_loads_what_children_compiled(tmp_path):
    """Through Triton's JIT (warmup under AsyncCompileMode), the forked children compile for
    sm_90 and this process only loads from the disk cache: the same four kernels as threads
    compile, and no compile here."""
    from costtune.build.pool import get_pool, shutdown_pool

    assert can_fork_compile()
    pool = get_pool(1)
    try:
        forked = pool.submit(_precompile_for_sm90, "processes", str(tmp_path / "a")).result()
        threads = pool.submit(_precompile_for_sm90, "threads", str(tmp_path / "b")).result()
    finally:
        shutdown_pool()
    # (the JIT's cache fills in the order compiles finish)
    assert sorted(h for h, _ in forked) == sorted(h for h, _ in threads)
    assert len({h for h, _ in forked}) == 4
    assert all(hit for _, hit in forked)  # compiled by the children
    assert not any(hit for _, hit in threads)


def _nfds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_refused_fork_inside_the_tree_compiles_that_subtree_here(monkeypatch):
    """Child 1 cannot fork children 3 and 5 (no memory, no pids): their jobs, and those of
    child 7 (3's to fork), run here, the rest in children, and no pipe is left open."""
    import costtune.build.forked as forked

    real = forked._fork

    def refusing(child):
        target = (child.__defaults__ or (None,))[0]
        if in_child() and target in (3, 5):
            return None
        return real(child)

    monkeypatch.setattr(forked, "_fork", refusing)
    before = _nfds()
    with ForkCompiler(workers=8, stall_s=10) as pool:
        futures = [pool.submit(lambda i=i: i) for i in range(8)]
        pool.start()
    assert [f.result() for f in futures] == list(range(8))
    assert pool.forked == 5 and pool.compiled_in_child == 5 and pool.ran_here == 3
    assert _nfds() <= before  # (earlier tests may close theirs meanwhile)


def test_more_than_1024_open_files_and_a_failing_start(monkeypatch, tmp_path):
    """poll, not select: watchers work past file descriptor 1024. A start that cannot even
    make its pipes compiles everything here and leaves no pipe open."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with ForkCompiler(workers=2, stall_s=10) as pool:
            futures = [pool.submit(lambda i=i: i) for i in range(4)]
            pool.start()
        assert [f.result(timeout=30) for f in futures] == [0, 1, 2, 3]
        assert pool.compiled_in_child == 4
    finally:
        for fd in held:
            os.close(fd)
    import costtune.build.forked as forked

    def no_pipes():
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(forked.os, "pipe", no_pipes)
    before = _nfds()
    with ForkCompiler(workers=4) as pool:
        futures = [pool.submit(lambda i=i: i) for i in range(4)]
        pool.start()
    assert [f.result(timeout=30) for f in futures] == [0, 1, 2, 3] and pool.ran_here == 4
    assert _nfds() <= before  # (earlier tests may close theirs meanwhile)


def test_start_batch_resets_async_mode_when_start_fails(monkeypatch):
    """If the forked batch cannot start, the AsyncCompileMode does not stay on in this thread
    (every later compile would go to it); configs compiling to one kernel all come back."""
    from triton.runtime._async_compile import active_mode

    import costtune.build.forked as forked
    import costtune.tune.precompile as module

    class Config:
        pre_hook = None

        def __init__(self, i):
            self.i = i

        def all_kwargs(self):
            return {"i": self.i}

    class Fn:
        def run(self, *args, warmup, i, **kw):
            return active_mode.get().submit(("kernel", i), lambda: i, lambda kernel: None)

    class Tuner:
        fn = Fn()

    monkeypatch.setattr(module, "can_precompile", lambda: True)
    monkeypatch.setattr(module, "_compiles_directly", lambda tuner: True)
    configs = [Config(0), Config(1), Config(1), Config(2)]  # 1 and 2: one compile key
    with module.start_batch(Tuner(), configs, named_args={}, kwargs={}, mode="threads") as b:
        assert sorted(i for i, _ in b) == [0, 1, 2, 3] and b.compiled == 4

    def broken_start(self):
        raise RuntimeError("cannot start")

    monkeypatch.setattr(forked.ForkCompiler, "start", broken_start)
    with pytest.raises(RuntimeError, match="cannot start"):
        module.start_batch(Tuner(), configs, named_args={}, kwargs={}, mode="processes")
    assert active_mode.get() is None


def test_a_child_silent_from_the_start_is_killed_after_stall_s(monkeypatch):
    """A child that never reports (stuck before its first word) is killed after stall_s and
    its jobs compiled here: nothing waits longer."""
    import costtune.build.forked as forked

    real = forked._child

    def mute(j, shares, pipes):
        if j == 0:
            time.sleep(60)
        real(j, shares, pipes)

    monkeypatch.setattr(forked, "_child", mute)
    start = time.perf_counter()
    with ForkCompiler(workers=2, stall_s=1.0) as pool:
        futures = [pool.submit(lambda i=i: i) for i in range(2)]
        pool.start()
    assert [f.result() for f in futures] == [0, 1]
    assert time.perf_counter() - start < 15 and pool.ran_here == 2


def test_no_forking_while_a_learn_update_runs_in_a_thread():
    """learn=True updates in a thread (tune.learn): while one is alive, compiles go to
    threads, since a fork would copy the process without it and any lock it holds."""
    import threading

    from costtune.build.forked import LEARN_THREAD

    assert can_fork_compile()
    release = threading.Event()
    update = threading.Thread(target=release.wait, args=(30,), name=f"{LEARN_THREAD}k")
    update.start()
    try:
        assert not can_fork_compile()
    finally:
        release.set()
        update.join()
    assert can_fork_compile()
