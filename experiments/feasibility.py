"""Does feasibility before ranking keep only configs that can launch, and drop none that can?

1. Each family's shared-memory lower bound (``kernels.<family>.shared_memory_floor``, what the
   hook drops by) and the tutorial-style estimate (the static feature ``smem_bytes_est``,
   stages * tiles * bytes) against the shared memory every dataset config compiled to
   (datasets/h200/features_<family>.parquet): how often each errs, each way.
2. The issue's unfiltered GEMM list (384 configs, 56 over 232,448 B by the tutorial estimate) at
   five shapes and k = 1, 4, 8: configs kept that cannot launch, before (the shipped model's
   own top k, what the hook kept) and after (the hook with feasibility).
3. 1,000 random shapes (seed 0), once with sizes rounded to multiples of 16 (aligned rows, where
   the floor is the compiled size) and once arbitrary: the top pick before and after. With
   ``--aot`` the kept top picks that the tutorial estimate calls too big are AOT-compiled for
   sm_90 on this CPU (one compile per config and alignment), to count those that really are.
4. With ``--aot``: kernels written as users write them, not in the dataset (Triton tutorial
   03's matmul, a TMA-descriptor matmul, tutorial 06's fused attention with TMA descriptors
   and warp_specialize, from experiments/device/safety_h200.py), AOT-compiled at 8192^3 and
   (4, 32, 4096, 128) over the configs near the limit: the floor against what they compile to.

CPU only, from the shipped data and model. Writes results/feasibility.{md,csv}.

    python experiments/feasibility.py [--shapes 1000] [--aot] [--out experiments/results]
"""

from __future__ import annotations

import argparse
import itertools
import platform
import subprocess
import sys
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import triton
import triton.language as tl

import costtune
from costtune.hardware import H200
from costtune.kernels import PROBLEM_KEYS
from costtune.model.features import config_rows
from costtune.model.xgb import CostModel
from costtune.tune.feasibility import meta_args, operand_alignment, shared_floor

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT / "datasets" / "h200"
LIMIT = H200.max_shared_per_block
UNFILTERED = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w,
                            num_stages=s)
              for m, n, k, w, s in itertools.product((32, 64, 128, 256), (32, 64, 128, 256),
                                                     (32, 64, 128), (4, 8), (2, 3, 4, 5))]
FIVE_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (4096, 1024, 4096), (2048, 2048, 2048),
               (1024, 8192, 4096)]
CONFIG_COLUMNS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "ROWS_PER_PROG", "num_warps",
                  "num_stages")


def provenance() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    import torch

    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"- Data: `{DATASET.relative_to(ROOT)}` (compiled features of every measured "
            f"config, NVIDIA H200); model: shipped `h200`.\n- Command: `python "
            f"{' '.join(sys.argv)}`\n- Generated {when} at commit {commit} on {platform.node()} "
            f"(CPU only; torch {torch.__version__}, triton {triton.__version__}).")


def estimate_errors() -> pd.DataFrame:
    """Per family and estimate: rows where it is above / equal to / below the compiled size."""
    out = []
    for family in ("gemm", "softmax", "attention"):
        rows = costtune.load_dataset(DATASET, kernel=family)
        feats = pd.read_parquet(DATASET / f"features_{family}.parquet",
                                columns=["workload", "config", "shared_bytes", "smem_bytes_est"])
        df = rows.merge(feats, on=["workload", "config"], validate="one_to_one")
        # Rows that did not compile have no size to compare (42 split 256x256 GEMM tiles).
        df = df[df["shared_bytes"].notna()].reset_index(drop=True)
        floor = np.zeros(len(df), dtype=np.int64)
        for _, group in df.groupby("workload", sort=False):
            first = group.iloc[0]
            problem = {k: int(first[k]) for k in PROBLEM_KEYS[family]}
            cols = {c: group[c].to_numpy(dtype=float) for c in CONFIG_COLUMNS if c in group}
            aligned = operand_alignment(family, meta_args(family, problem, first["dtype"]))
            floor[group.index] = shared_floor(family, problem, cols, dtype=first["dtype"],
                                              aligned=aligned, target=H200)
        compiled = df["shared_bytes"].to_numpy(dtype=float)
        for name, est in (("floor (hook)", floor.astype(float)),
                          ("tutorial estimate", df["smem_bytes_est"].to_numpy(dtype=float))):
            over, under = est > compiled, est < compiled
            ratio = np.where(compiled > 0, est / np.maximum(compiled, 1), np.nan)
            out.append({"family": family, "estimate": name, "rows": len(df),
                        "above_compiled": int(over.sum()), "equal": int((est == compiled).sum()),
                        "below_compiled": int(under.sum()),
                        "max_ratio_above": float(np.nanmax(ratio[over])) if over.any() else 1.0,
                        "min_ratio_below": float(np.nanmin(ratio[under])) if under.any() else 1.0})
    return pd.DataFrame(out)


def gemm_args(m: int, n: int, k: int) -> dict:
    return {**meta_args("gemm", {"M": m, "N": n, "K": k}, "float16"), "M": m, "N": n, "K": k}


def floor_of(config, shape) -> int:
    m, n, k = shape
    p = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    return int(shared_floor("gemm", {"M": m, "N": n, "K": k}, p, dtype="float16",
                            aligned=operand_alignment("gemm", gemm_args(m, n, k)), target=H200))


def tutorial(config) -> int:
    kw = config.kwargs
    return config.num_stages * (kw["BLOCK_M"] + kw["BLOCK_N"]) * kw["BLOCK_K"] * 2


def model_scores(shapes) -> np.ndarray:
    """The shipped model's scores of the unfiltered list (neutral SPLIT_K=1, as the hook
    scores them), one row per shape: what the hook ranked before feasibility."""
    model = CostModel.load_for("h200", "gemm")[0]
    configs = [costtune.Config({**c.kwargs, "SPLIT_K": 1}, num_warps=c.num_warps,
                               num_stages=c.num_stages) for c in UNFILTERED]
    rows = pd.concat([config_rows("gemm", dict(zip("MNK", s)), "float16", configs)
                      for s in shapes], ignore_index=True)
    return model.predict(rows).reshape(len(shapes), len(configs))


def five_shapes() -> pd.DataFrame:
    scores = model_scores(FIVE_SHAPES)
    out = []
    for (shape, row), k in itertools.product(zip(FIVE_SHAPES, scores), (1, 4, 8)):
        before = [UNFILTERED[i] for i in np.argsort(-row, kind="stable")[:k]]
        pruner = costtune.prune_configs_by("h200", k, family="gemm")["early_config_prune"]
        kept = pruner(UNFILTERED, gemm_args(*shape))
        out.append({"shape": "x".join(map(str, shape)), "k": k, "kept_after": len(kept),
                    "dropped": len(pruner.last.dropped),
                    "before_cannot_launch": sum(floor_of(c, shape) > LIMIT for c in before),
                    "after_cannot_launch": sum(floor_of(c, shape) > LIMIT for c in kept),
                    "before_over_tutorial": sum(tutorial(c) > LIMIT for c in before),
                    "after_over_tutorial": sum(tutorial(c) > LIMIT for c in kept),
                    "fallbacks": ",".join(pruner.last.fallbacks)})
    return pd.DataFrame(out)


def random_shapes(n: int, *, aligned: bool) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(0)
    lo, hi = np.log2([16, 256, 512]), np.log2([8192, 16384, 16384])
    raw = [tuple(2 ** rng.uniform(lo, hi)) for _ in range(n)]
    if aligned:
        return [tuple(int(16 * max(1, round(x / 16))) for x in s) for s in raw]
    return [tuple(max(1, int(round(x))) for x in s) for s in raw]


def random_top1(n: int, *, aligned: bool) -> tuple[pd.DataFrame, list]:
    shapes = random_shapes(n, aligned=aligned)
    scores = model_scores(shapes)
    pruner = costtune.prune_configs_by("h200", 1, family="gemm", widen=1)["early_config_prune"]
    out, picks = [], []
    for shape, row in zip(shapes, scores):
        before = UNFILTERED[int(np.argmax(row))]
        after = pruner(UNFILTERED, gemm_args(*shape))[0]
        picks.append((shape, after))
        out.append({"aligned_draw": aligned, "shape": "x".join(map(str, shape)),
                    "before": costtune.Config.from_triton(before).key,
                    "after": costtune.Config.from_triton(after).key,
                    "before_cannot_launch": floor_of(before, shape) > LIMIT,
                    "after_cannot_launch": floor_of(after, shape) > LIMIT,
                    "before_over_tutorial": tutorial(before) > LIMIT,
                    "after_over_tutorial": tutorial(after) > LIMIT})
    return pd.DataFrame(out), picks


def aot_check(picks: list) -> pd.DataFrame:
    """Compile (sm_90, this CPU) each distinct (kept top pick, operand alignment) whose tutorial
    estimate exceeds the limit: is it really too big?"""
    from costtune.features import compiled_features

    todo = {}
    for shape, config in picks:
        if tutorial(config) <= LIMIT:
            continue
        al = tuple(operand_alignment("gemm", gemm_args(*shape)).values())
        todo.setdefault((costtune.Config.from_triton(config).key, al), shape)
    if not todo:
        return pd.DataFrame(columns=["config", "aligned_a_b", "shape", "compile_status",
                                     "shared_bytes"])
    rows = pd.DataFrame([{"kernel": "gemm", "workload": f"w{i}", "dtype": "float16",
                          "M": s[0], "N": s[1], "K": s[2],
                          "config": key.replace(",num_warps", ",SPLIT_K=1,num_warps")}
                         for i, ((key, _), s) in enumerate(todo.items())])
    table = compiled_features(rows, workers=1)
    return pd.DataFrame([{"config": key, "aligned_a_b": al, "shape": "x".join(map(str, s)),
                          "compile_status": t["compile_status"], "shared_bytes": t["shared_bytes"]}
                         for ((key, al), s), (_, t) in zip(todo.items(), table.iterrows())])


@triton.jit
def matmul_tma_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_SIZE_M: tl.constexpr,
                      BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                      GROUP_SIZE_M: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """A matmul over host TMA descriptors, in the style of Triton's tutorial 09."""
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in tl.range(tl.cdiv(K, BLOCK_SIZE_K), warp_specialize=WARP_SPECIALIZE):
        a = a_desc.load([pid_m * BLOCK_SIZE_M, k * BLOCK_SIZE_K])
        b = b_desc.load([k * BLOCK_SIZE_K, pid_n * BLOCK_SIZE_N])
        accumulator = tl.dot(a, b, accumulator)
    c_desc.store([pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N], accumulator.to(tl.float16))


def user_kernel_calls():
    """(kernel name, family, family params, launch args, KernelCall) for each user-style
    kernel and config near the shared-memory limit."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    sys.path.insert(0, str(ROOT / "experiments" / "device"))
    import safety_h200 as styled

    from costtune.kernels import KernelCall

    m = n = k = 8192
    a = torch.empty(m, k, dtype=torch.float16, device="meta")
    b = torch.empty(k, n, dtype=torch.float16, device="meta")
    c = torch.empty(m, n, dtype=torch.float16, device="meta")
    near = [cf for cf in UNFILTERED if 0.6 * LIMIT <= tutorial(cf) <= 1.4 * LIMIT]
    for cf in near:
        bm, bn, bk = (cf.kwargs[x] for x in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
        p = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": cf.num_warps,
             "num_stages": cf.num_stages}
        kw = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8}
        args = (a, b, c, m, n, k, k, 1, n, 1, n, 1)
        yield ("tutorial03_matmul", "gemm", p, {"a": a, "b": b},
               KernelCall(styled.matmul_kernel, (1,), args, kw, cf.num_warps, cf.num_stages))
        descs = [TensorDescriptor(t, shape=list(t.shape), strides=list(t.stride()),
                                  block_shape=bs) for t, bs in ((a, [bm, bk]), (b, [bk, bn]),
                                                                (c, [bm, bn]))]
        for ws in (False, True):
            yield ("tma_matmul" + ("_ws" if ws else ""), "gemm", p,
                   {"a": descs[0], "b": descs[1]},
                   KernelCall(matmul_tma_kernel, (1,), (*descs, m, n, k),
                              {**kw, "WARP_SPECIALIZE": ws}, cf.num_warps, cf.num_stages))
    z, h, s, d = 4, 32, 4096, 128
    q = torch.empty(z, h, s, d, dtype=torch.float16, device="meta")
    mt = torch.empty(z, h, s, dtype=torch.float32, device="meta")
    for cf in styled.attention_configs(d):
        bm, bn = cf.kwargs["BLOCK_M"], cf.kwargs["BLOCK_N"]
        descs = [TensorDescriptor(q, shape=[z * h * s, d], strides=[d, 1], block_shape=bs)
                 for bs in ([bm, d], [bn, d], [bn, d], [bm, d])]
        p = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": cf.num_warps,
             "num_stages": cf.num_stages}
        kw = {"HEAD_DIM": d, "BLOCK_M": bm, "BLOCK_N": bn, "STAGE": 3,
              "warp_specialize": cf.kwargs["warp_specialize"]}
        yield ("tutorial06_attention" + ("_ws" if kw["warp_specialize"] else ""), "attention",
               p, dict(zip(("desc_q", "desc_k", "desc_v"), descs)),
               KernelCall(styled._attn_fwd, (1,), (0.1, mt, z, h, *descs, s), kw,
                          cf.num_warps, cf.num_stages))


def user_kernels() -> pd.DataFrame:
    """Section 4: AOT compile (sm_90, this CPU, in this process) against the floor."""
    from costtune.build.aot import compile_job, specialize

    rows = []
    for name, family, p, args, call in user_kernel_calls():
        out = compile_job(specialize(call), sass=False)
        problem = {"D": 128} if family == "attention" else {}
        ws = any(k.lower() == "warp_specialize" and bool(v) for k, v in call.kwargs.items())
        floor = int(shared_floor(family, problem, p, dtype="float16",
                                 aligned=operand_alignment(family, args), target=H200,
                                 warp_specialized=ws))
        rows.append({"kernel": name, **p, "status": out["status"],
                     "shared_bytes": out.get("shared_bytes"), "floor": floor,
                     "error": out["error"][:120]})
    return pd.DataFrame(rows)


def user_summary(user: pd.DataFrame) -> pd.DataFrame:
    compiled = user[user["shared_bytes"].notna()]
    g = compiled.groupby("kernel")
    return pd.DataFrame({
        "compiled": g.size(),
        "floor_above_compiled": g.apply(lambda x: int((x["floor"] > x["shared_bytes"]).sum())),
        "over_limit": g.apply(lambda x: int((x["shared_bytes"] > LIMIT).sum())),
        "dropped_by_floor": g.apply(lambda x: int((x["floor"] > LIMIT).sum())),
        "over_limit_but_kept": g.apply(lambda x: int(((x["shared_bytes"] > LIMIT)
                                                      & (x["floor"] <= LIMIT)).sum())),
        "max_compiled_minus_floor": g.apply(lambda x: int((x["shared_bytes"]
                                                           - x["floor"]).max())),
        "compile_errors": user[user["shared_bytes"].isna()].groupby("kernel").size(),
    }).fillna(0).astype(int).reset_index()


def report(errors, five, rand, aot, out: Path, user=None) -> None:
    lines = ["# Feasibility before ranking: what cannot launch is never kept", "",
             provenance(), "", "## 1. Shared-memory estimates against the compiled size", "",
             "Rows: every dataset config that compiled (all of those ran). `above`: the "
             "estimate says more than the kernel needs (dropping by it could drop a config "
             "that launches); `below`: less (a config over the limit could be kept; the "
             "replacement in costtune.autotune catches it).", "",
             errors.to_markdown(index=False), "",
             "## 2. The unfiltered GEMM list (384 configs) at five shapes", "",
             "`cannot_launch`: the floor, which equals the compiled size on aligned GEMM rows "
             "without split-K (section 1), is over 232,448 B. `before`: the shipped model's own "
             "top k over the whole list; `after`: the hook.", "",
             five.to_markdown(index=False), "",
             f"Total kept configs that cannot launch: before {five['before_cannot_launch'].sum()}"
             f", after {five['after_cannot_launch'].sum()}.", "",
             "## 3. Top pick over random shapes (seed 0)", ""]
    summary = rand.groupby("aligned_draw")[["before_cannot_launch", "after_cannot_launch",
                                            "before_over_tutorial", "after_over_tutorial"]].sum()
    summary.insert(0, "shapes", rand.groupby("aligned_draw").size())
    lines += [summary.reset_index().to_markdown(index=False), "",
              "On unaligned rows the tutorial estimate overstates: those loads are not "
              "multi-buffered (a 128x256x64, 5-stage config compiles to 49,152 B at 1000^3), "
              "so the hook keeps such configs."]
    if aot is not None:
        lines += ["", "AOT compile (sm_90) of each kept top pick over the tutorial estimate, "
                  "per operand alignment:", "", aot.to_markdown(index=False) if len(aot)
                  else "(none)"]
    if user is not None:
        lines += ["", "## 4. Kernels as users write them (AOT compile, sm_90)", "",
                  "Configs near the limit (tutorial estimate within 0.6-1.4x of 232,448 B) at "
                  "8192^3 for the matmuls, every config of the attention list at (4, 32, 4096, "
                  "128) causal. `dropped_by_floor`: what the hook drops; `over_limit_but_kept`: "
                  "what only costtune.autotune's replacement catches.", "",
                  user_summary(user).to_markdown(index=False)]
    (out / "feasibility.md").write_text("\n".join(lines) + "\n")
    frames = [errors.assign(section="estimates"), five.assign(section="five_shapes"),
              rand.assign(section="random_top1")]
    if aot is not None:
        frames.append(aot.assign(section="aot"))
    if user is not None:
        frames.append(user.assign(section="user_kernels"))
    pd.concat(frames, ignore_index=True).to_csv(out / "feasibility.csv", index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", type=int, default=1000)
    parser.add_argument("--aot", action="store_true", help="AOT-compile doubtful top picks")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore", costtune.CosttuneWarning)
    errors = estimate_errors()
    print(errors.to_string(index=False))
    five = five_shapes()
    print(five.to_string(index=False))
    frames, picks = [], []
    for aligned in (True, False):
        frame, p = random_top1(args.shapes, aligned=aligned)
        frames.append(frame)
        picks += p if not aligned else []
    rand = pd.concat(frames, ignore_index=True)
    print(rand.groupby("aligned_draw")[[c for c in rand if c.endswith(("launch", "tutorial"))]]
          .sum().to_string())
    aot = aot_check(picks) if args.aot else None
    user = user_kernels() if args.aot else None
    if aot is not None:
        print(aot.to_string(index=False))
        print(user_summary(user).to_string(index=False))
    report(errors, five, rand, aot, args.out, user)
    print(f"wrote {args.out / 'feasibility.md'} and .csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
