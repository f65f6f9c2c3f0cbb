"""Kernels written outside the project, timed over their whole config lists on the H200, and
what the pruning hook keeps of each list under each ranking method (issue 18: the two stages).

For every style of ``experiments/user_kernels.py`` (Triton tutorials 02, 03, 06, 09, a
persistent attention and an Inductor softmax) and ``user_kernels_variants.py`` (GQA, a sliding
window) and a few shapes: exhaustive ``triton.autotune``
with costtune's graph timing (``costtune.graph_bench``) gives every config's time, all configs
compiled first in parallel (``costtune.tune.precompile``, forked processes); a spy pruner
records the call's arguments. Then each method's pruner is called on those arguments, as Triton
would call it, at top_k = 1, 4, 8, and scored by TenSet's ratio: the best time of the list over
the best time among the kept. Methods: ``stage1`` (the default hook, static features),
``two_stage`` (compiled features of the user's own kernel, blended at the shipped stage-1
weight), ``two_stage:w0`` (the compiled booster alone), ``two_stage:no_ir`` (the booster for
all families without IR counts, which GEMM's own replaced) and ``two_stage:ours`` (compiled
features of costtune's own kernel of the family at the same configs: the hook before this
change); and, through ``triton.autotune`` itself with the hook (``autotune:stage1``,
``autotune:two_stage``): the config Triton picks (after the hook's precompile replaced what
cannot launch), scored the same way against the same call's exhaustive times.

Writes ``$OUT/spaces.jsonl`` (every config's time per shape) and ``$OUT/methods.jsonl`` (one
line per shape, method and k), line by line; a shape already in them is skipped (resumable).
``--learn-shapes``: only the whole-list times (``spaces.jsonl``) at the more shapes of
``LEARN_SHAPES``, the data ``experiments/learn_user_kernels.py`` replays ``learn=True`` on.

    python3 experiments/device/hook_user_spaces_h200.py --out $OUT [--budget-s 420]
        [--learn-shapes]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

SHAPES = {
    "tutorial03_matmul": [{"M": 2048, "N": 11008, "K": 4096}, {"M": 4096, "N": 4096, "K": 4096},
                          {"M": 512, "N": 8192, "K": 8192}, {"M": 1024, "N": 5120, "K": 5120}],
    "tutorial09_tma_matmul": [{"M": 4096, "N": 4096, "K": 4096},
                              {"M": 2048, "N": 11008, "K": 4096}],
    "tutorial06_attention": [{"B": 4, "H": 16, "S": 2048, "D": 64, "causal": 1},
                             {"B": 2, "H": 16, "S": 4096, "D": 128, "causal": 0},
                             {"B": 8, "H": 16, "S": 1024, "D": 128, "causal": 1}],
    "inductor_softmax": [{"rows": 32768, "cols": 2048}, {"rows": 8192, "cols": 8192},
                         {"rows": 4096, "cols": 30000}],
    # tutorial 06's shapes, and one whose 2 x 8 heads leave most SMs idle without looping.
    "persistent_attention": [{"B": 4, "H": 16, "S": 2048, "D": 64, "causal": 1},
                             {"B": 2, "H": 16, "S": 4096, "D": 128, "causal": 0},
                             {"B": 8, "H": 16, "S": 1024, "D": 128, "causal": 1},
                             {"B": 2, "H": 8, "S": 8192, "D": 128, "causal": 1}],
    "tutorial02_softmax": [{"rows": 8192, "cols": 3000}, {"rows": 32768, "cols": 1024}],
    # Inductor's matmul template (EVEN_K by a heuristic); the last shape has an uneven K.
    "inductor_mm": [{"M": 4096, "N": 4096, "K": 4096}, {"M": 2048, "N": 11008, "K": 4096},
                    {"M": 1024, "N": 5120, "K": 5120}, {"M": 3000, "N": 2999, "K": 777}],
    # flash-attn's forward over (B, S, H, D) queries, sizes as nheads / seqlen_q / headdim.
    "flashattn_bshd": [{"B": 4, "H": 16, "S": 2048, "D": 64, "causal": 1},
                       {"B": 2, "H": 16, "S": 4096, "D": 128, "causal": 0},
                       {"B": 8, "H": 16, "S": 1024, "D": 128, "causal": 1}],
    # Inductor's addmm + ReLU template over a Linear's (2, M/2, K) activation, sizes as
    # dynamic-shape symbols: M read from the activation's leading dims.
    "inductor_linear": [{"M": 4096, "N": 4096, "K": 4096}, {"M": 2048, "N": 11008, "K": 4096},
                        {"M": 1024, "N": 5120, "K": 5120}, {"M": 3000, "N": 2999, "K": 777}],
    # user_kernels_variants.py: grouped-query heads (read without a doubt, as attention over
    # the query heads) and a sliding window (a "shape" doubt: k widened).
    "gqa_attention": [{"B": 4, "H": 32, "Hkv": 8, "S": 2048, "D": 128, "causal": 1},
                      {"B": 2, "H": 32, "Hkv": 8, "S": 4096, "D": 128, "causal": 0},
                      {"B": 8, "H": 16, "Hkv": 2, "S": 1024, "D": 64, "causal": 1}],
    "sliding_window_attention": [
        {"B": 4, "H": 16, "S": 4096, "D": 64, "causal": 1, "window": 512},
        {"B": 2, "H": 16, "S": 8192, "D": 128, "causal": 1, "window": 1024},
        {"B": 8, "H": 32, "S": 2048, "D": 128, "causal": 1, "window": 256}],
}
# More shapes per style, whole lists timed only (--learn-shapes): with SHAPES, the sequence of
# tuning calls experiments/learn_user_kernels.py replays learn=True over.
LEARN_SHAPES = {
    "tutorial03_matmul": [{"M": 8192, "N": 8192, "K": 1024}, {"M": 4096, "N": 14336, "K": 4096},
                          {"M": 256, "N": 4096, "K": 4096}, {"M": 2048, "N": 2048, "K": 8192},
                          {"M": 8192, "N": 1024, "K": 4096}, {"M": 3072, "N": 3072, "K": 3072}],
    "inductor_softmax": [{"rows": 16384, "cols": 4096}, {"rows": 65536, "cols": 1024},
                         {"rows": 2048, "cols": 50304}, {"rows": 131072, "cols": 512},
                         {"rows": 8192, "cols": 12288}, {"rows": 1024, "cols": 131072}],
    "tutorial02_softmax": [{"rows": 4096, "cols": 4096}, {"rows": 16384, "cols": 768},
                           {"rows": 2048, "cols": 12000}, {"rows": 65536, "cols": 512},
                           {"rows": 2048, "cols": 8192}, {"rows": 8192, "cols": 1500}],
    "tutorial06_attention": [{"B": 4, "H": 32, "S": 1024, "D": 64, "causal": 0},
                             {"B": 1, "H": 16, "S": 8192, "D": 128, "causal": 1},
                             {"B": 16, "H": 8, "S": 512, "D": 64, "causal": 1}],
    "tutorial09_tma_matmul": [{"M": 8192, "N": 8192, "K": 1024},
                              {"M": 1024, "N": 5120, "K": 5120},
                              {"M": 3072, "N": 3072, "K": 3072},
                              {"M": 512, "N": 8192, "K": 8192}],
    "inductor_mm": [{"M": 8192, "N": 8192, "K": 1024}, {"M": 256, "N": 4096, "K": 4096},
                    {"M": 512, "N": 8192, "K": 8192}, {"M": 8192, "N": 1024, "K": 4096},
                    {"M": 3072, "N": 3072, "K": 3072}, {"M": 1000, "N": 1000, "K": 1000}],
}
METHODS = {"stage1": {}, "two_stage": {"two_stage": True},
           "two_stage:w0": {"two_stage": True, "stage1_weight": 0.0},
           "two_stage:ours": {"two_stage": True},
           # The cross-family static+compiled booster (no IR counts) at the family's shipped
           # weight: GEMM's stage 2 before the twenty-ninth session, side by side.
           "two_stage:no_ir": {"two_stage": True}}
# Through triton.autotune itself, as a user runs it: the hook prunes, precompiles (and
# replaces what cannot launch), Triton benchmarks the kept configs and launches its pick.
TUNED = {"autotune:stage1": {}, "autotune:two_stage": {"two_stage": True}}
KS = (1, 4, 8)


def configs_of(name: str) -> list:
    if name == "tutorial03_matmul":  # the 328-config list of issue 20's figures
        from experiments.cold_tune.cases import matmul_configs

        return matmul_configs()
    from user_kernels_variants import ALL_STYLES as STYLES

    return STYLES[name].configs("gpu")


def measure(name: str, problem: dict, configs: list) -> tuple[dict, dict, object]:
    """Every config's time (ms, inf when it cannot run) and the call's arguments."""
    import torch
    import triton
    from user_kernels_variants import ALL_STYLES as STYLES

    import costtune
    from costtune.tune.precompile import precompile

    style = STYLES[name]
    seen: dict = {}
    holder: dict = {}

    def spy(configs, named_args, **kwargs):
        seen.update(named_args=dict(named_args), kwargs=dict(kwargs))
        precompile(holder["tuner"], configs, named_args=named_args, kwargs=kwargs,
                   mode="processes")
        return configs

    tuner = triton.autotune(configs, key=list(style.key), do_bench=costtune.graph_bench,
                            prune_configs_by={"early_config_prune": spy})(style.kernel)
    holder["tuner"] = tuner
    inputs = style.make_inputs(problem, device="cuda", dtype=style.gpu_dtype)
    out = style.launch(tuner, inputs)
    torch.cuda.synchronize()
    from user_kernels import relative_error

    err = relative_error(out, style.reference(inputs))
    times = {}
    for config, t in tuner.configs_timings.items():
        t = t[0] if isinstance(t, (list, tuple)) else t
        times[str(config)] = float(t)
    return {"times": times, "best_config_error": err}, seen, tuner


def kept_by(method: str, family: str, k: int, configs: list, seen: dict, tuner) -> dict:
    import costtune

    options = METHODS[method]
    if method == "two_stage:no_ir":
        from costtune.model.files import shipped_model_dir
        from costtune.tune.ranking import stage1_weight

        options = {**options, "stage2_model": str(shipped_model_dir() / "h200_compiled.json"),
                   "stage1_weight": stage1_weight("h200_compiled", family)}
    pruner = costtune.prune_configs_by("h200", k, family=family, preload=False,
                                       precompile=False, **options)["early_config_prune"]
    pruner.kernel = tuner
    start = time.perf_counter()
    if method == "two_stage:ours":
        with mock.patch("costtune.tune.ranking.kernel_compiled_table",
                        side_effect=RuntimeError("forced: costtune's kernel")):
            kept = pruner(configs, seen["named_args"], **seen["kwargs"])
    else:
        kept = pruner(configs, seen["named_args"], **seen["kwargs"])
    last = pruner.last
    return {"kept": [str(c) for c in kept], "prune_s": time.perf_counter() - start,
            "stage2": bool(last.stage2), "stage2_kernel": last.stage2_kernel,
            "read_as": f"{last.family} {last.problem}", "notes": [m for _, m in last.notes]}


def tuned_by(method: str, name: str, k: int, configs: list, inputs: dict) -> dict:
    """A fresh ``triton.autotune`` with the hook at ``k``: the config Triton picked (None when
    the launch raised) and what the hook kept and replaced."""
    import torch
    import triton
    from user_kernels_variants import ALL_STYLES as STYLES

    import costtune

    style = STYLES[name]
    hook = costtune.prune_configs_by("h200", k, family=style.family, preload=False,
                                     **TUNED[method])
    tuner = triton.autotune(configs, key=list(style.key), do_bench=costtune.graph_bench,
                            prune_configs_by=hook)(style.kernel)
    start = time.perf_counter()
    try:
        style.launch(tuner, inputs)
        torch.cuda.synchronize()
        picked, error = str(tuner.best_config), None
    except Exception as exc:  # what a user would meet
        picked, error = None, f"{type(exc).__name__}: {str(exc)[:300]}"
    last = hook["early_config_prune"].last
    return {"picked": picked, "error": error, "tune_s": time.perf_counter() - start,
            "kept": list(last.kept) if last else None,
            "replaced": dict(last.replaced) if last else None,
            "stage2_kernel": last.stage2_kernel if last else None}


def done_shapes(path: Path) -> set:
    if not path.exists():
        return set()
    return {(r["style"], json.dumps(r["problem"], sort_keys=True))
            for r in map(json.loads, path.read_text().splitlines())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--styles", nargs="*", default=None)
    ap.add_argument("--learn-shapes", action="store_true",
                    help="whole-list times only, at LEARN_SHAPES")
    args = ap.parse_args()
    shapes = LEARN_SHAPES if args.learn_shapes else SHAPES
    import torch
    import triton
    from user_kernels_variants import ALL_STYLES as STYLES

    from costtune.env import environment

    args.out.mkdir(parents=True, exist_ok=True)
    spaces, methods = args.out / "spaces.jsonl", args.out / "methods.jsonl"
    done = done_shapes(spaces if args.learn_shapes else methods)
    env = environment(sm_clock=False)
    start = time.perf_counter()
    for name in args.styles or list(shapes):
        configs = configs_of(name)
        for problem in shapes[name]:
            key = (name, json.dumps(problem, sort_keys=True))
            if key in done:
                continue
            if time.perf_counter() - start > args.budget_s:
                print(f"budget spent: {name} {problem} and later not run", flush=True)
                return 0
            t0 = time.perf_counter()
            record, seen, tuner = measure(name, problem, configs)
            with spaces.open("a") as f:
                f.write(json.dumps({"style": name, "problem": problem, "n_configs": len(configs),
                                    "seconds": time.perf_counter() - t0, **env, **record})
                        + "\n")
            times = record["times"]
            best = min(times.values())
            print(f"{name} {problem}: {len(configs)} configs in {time.perf_counter() - t0:.0f}"
                  f" s, best {best:.4f} ms, error {record['best_config_error']:.2e}",
                  flush=True)
            if args.learn_shapes:
                del tuner
                torch.cuda.empty_cache()
                continue
            for method in METHODS:
                for k in KS:
                    got = kept_by(method, STYLES[name].family, k, configs, seen, tuner)
                    got["score"] = best / min(times.get(c, float("inf")) for c in got["kept"])
                    with methods.open("a") as f:
                        f.write(json.dumps({"style": name, "problem": problem, "method": method,
                                            "k": k, **got}) + "\n")
            inputs = STYLES[name].make_inputs(problem, device="cuda",
                                              dtype=STYLES[name].gpu_dtype)
            for method in TUNED:
                for k in KS:
                    got = tuned_by(method, name, k, configs, inputs)
                    got["score"] = (best / times[got["picked"]] if got["picked"] in times
                                    else 0.0)
                    with methods.open("a") as f:
                        f.write(json.dumps({"style": name, "problem": problem, "method": method,
                                            "k": k, **got}) + "\n")
            del tuner
            torch.cuda.empty_cache()
    print("torch", torch.__version__, "triton", triton.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
