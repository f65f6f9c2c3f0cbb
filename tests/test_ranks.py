"""The same config on every rank: ``costtune.autotune(..., ranks="rank0")``, with two CPU ranks
(torch.multiprocessing spawn, gloo, Triton's interpreter). Each rank's do_bench reports
rank-dependent times (rank 0: the first config timed is fastest; rank 1: the last), so ranks
tuning on their own pick different configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import triton
import triton.language as tl
from helpers import launch_tile_matmul, masked_tile_matmul

import costtune
from costtune.kernels import relative_error

CONFIGS = [triton.Config({"BM": 32, "BN": bn, "BK": bk}, num_warps=w, num_stages=2)
           for bn in (32, 64, 128) for bk in (32, 64) for w in (4, 8)]
SHAPES = [(16, 128, 256), (32, 64, 128)]  # two tuning keys


@triton.jit
def _ranked_matmul(x, y, out, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    masked_tile_matmul(x, y, out, m, n, k, BM, BN, BK)


class RankBench:
    """do_bench with fake times: rank 0 finds the first config it times fastest, rank 1 the
    last (runs each config once, counts the calls)."""

    def __init__(self, rank: int, fail: bool = False) -> None:
        self.rank, self.calls, self.fail = rank, 0, fail

    def __call__(self, fn, quantiles=None):
        self.calls += 1
        if self.rank == 0 and self.fail:
            raise RuntimeError("rank 0's launch failed")
        fn()
        ms = float(self.calls if self.rank == 0 else 100 - self.calls)
        return [ms, ms, ms]


def tuner_for(bench, **options):
    return costtune.autotune(CONFIGS, key=["m", "n", "k"], top_k=2, model="h200",
                             family="gemm", problem={"M": "m", "N": ("y", 1), "K": "k"},
                             params={"BM": "BLOCK_M", "BN": "BLOCK_N", "BK": "BLOCK_K"},
                             do_bench=bench, **options)(_ranked_matmul)


tune = launch_tile_matmul  # one checked launch through the tuner; the config it used


def rank_worker(rank: int, init: str, ranks: str, out: str, fail: bool) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
    try:
        bench = RankBench(rank, fail)
        tuner = tuner_for(bench, ranks=ranks)
        try:
            best = [tune(tuner, *shape) for shape in SHAPES]
            best.append(tune(tuner, *SHAPES[0]))  # a tuned key: no collective, no benchmark
            error = None
        except RuntimeError as exc:
            best, error = [], str(exc)
        Path(out, f"rank{rank}.json").write_text(json.dumps({"calls": bench.calls,
                                                             "best": best, "error": error}))
    finally:
        dist.destroy_process_group()


def run_ranks(tmp_path: Path, ranks: str, *, fail: bool = False) -> list[dict]:
    out = tmp_path / f"{ranks}{'_fail' if fail else ''}"
    out.mkdir()
    mp.spawn(rank_worker, args=(str(out / "init"), ranks, str(out), fail), nprocs=2,
             join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_rank0_tunes_and_the_others_take_its_choice(tmp_path):
    each = run_ranks(tmp_path, "each")
    assert each[0]["calls"] >= 4 and each[1]["calls"] == each[0]["calls"]
    assert each[0]["best"][0] != each[1]["best"][0]  # on their own the ranks disagree
    synced = run_ranks(tmp_path, "rank0")
    assert synced[1]["calls"] == 0  # rank 1 benchmarked nothing
    assert synced[0]["calls"] == each[0]["calls"]
    assert synced[1]["best"] == synced[0]["best"] == each[0]["best"]
    assert synced[0]["error"] is None and synced[1]["error"] is None


def test_rank0_failing_does_not_leave_the_others_waiting(tmp_path):
    failed, other = run_ranks(tmp_path, "rank0", fail=True)
    assert "rank 0's launch failed" in failed["error"]
    assert other["calls"] == 0 and "rank 0 chose no config" in other["error"]


def test_ranks_without_a_process_group_and_bad_values():
    assert not dist.is_initialized()
    bench = RankBench(0)
    tuner = tuner_for(bench, ranks="rank0")
    tune(tuner, *SHAPES[0])
    assert bench.calls == len(tuner.configs_timings) >= 2  # tuned here as usual
    with pytest.raises(ValueError, match=r"^ranks must be one of \['each', 'rank0'\], "
                                         r"got 'one'$"):
        tuner_for(bench, ranks="one")


def nccl_worker(rank: int, init: str, ranks: str, out: str) -> None:
    """One of two GPU ranks (NCCL, one GPU each): costtune's GEMM kernel tuned with its real
    timing at two shapes; what it benchmarked and chose."""
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init}", rank=rank, world_size=2)
    try:
        gemm = costtune.get_family("gemm")
        calls = []

        def bench(fn, quantiles=None):
            calls.append(1)
            return costtune.graph_bench(fn, quantiles=quantiles)

        configs = [c for c in gemm.config_space({"M": 2048, "N": 2048, "K": 2048}).to_triton()
                   if c.kwargs.get("SPLIT_K", 1) == 1][:48]
        small = gemm.make_inputs({"M": 64, "N": 64, "K": 64}, "float16")
        fn = gemm.kernel_calls(small, {**configs[0].kwargs, "num_warps": 4,
                                       "num_stages": 2})[0].fn
        tuner = costtune.autotune(configs, key=["M", "N", "K"], top_k=4, family="gemm",
                                  do_bench=bench, ranks=ranks)(fn)
        best = []
        for size in (2048, 4096):
            problem = {"M": size, "N": size, "K": size}
            inputs = gemm.make_inputs(problem, "float16", device="cuda")
            call = gemm.kernel_calls(inputs, {**configs[0].kwargs, "num_warps": 4,
                                              "num_stages": 2})[0]
            tuned = {k for c in configs for k in c.kwargs}
            fixed = {k: v for k, v in call.kwargs.items() if k not in tuned
                     and k != "NUM_STAGES"}
            tuner[lambda meta, p=problem, names=gemm.config_space().names: tuple(gemm.grid(p, {
                "num_warps": 4, "num_stages": 1, **{n: meta[n] for n in names if n in meta}}))](
                *call.args, **fixed)
            torch.cuda.synchronize()
            out = call.args[list(fn.arg_names).index("c_ptr")]
            assert relative_error(out, gemm.reference(inputs)) <= gemm.TOLERANCE["float16"]
            best.append(str(tuner.best_config))
        Path(out, f"rank{rank}.json").write_text(json.dumps({"calls": len(calls),
                                                             "best": best}))
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="needs two GPUs")
def test_rank0_over_nccl_on_two_gpus(tmp_path):
    """Issue 20 on real GPUs: with ranks="rank0" rank 1 benchmarks nothing and runs rank 0's
    choice at every shape; with "each" both ranks benchmark."""
    results = {}
    for ranks in ("each", "rank0"):
        out = tmp_path / ranks
        out.mkdir()
        mp.spawn(nccl_worker, args=(str(out / "init"), ranks, str(out)), nprocs=2, join=True)
        results[ranks] = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    each, synced = results["each"], results["rank0"]
    assert each[0]["calls"] >= 8 and each[1]["calls"] >= 8
    assert synced[1]["calls"] == 0 and synced[0]["calls"] >= 8
    assert synced[1]["best"] == synced[0]["best"] and len(synced[0]["best"]) == 2
