"""Research question: how well does the pruning hook rank kernels written outside the project,
and what do its two stages add there? (issue 18; measured on the H200, reported on the CPU)

Reads the raw records of ``experiments/device/hook_user_spaces_h200.py`` (every config of each
user-style kernel timed at a few shapes, and what each ranking method keeps) from
``experiments/results/raw/hook_user_spaces/`` and writes
``experiments/results/hook_user_spaces.{md,csv}``: per method and k, the TenSet ratio best
time of the whole list / best time among the kept (1.0: the list's best was kept), per shape
and summarised (mean, min), with the seconds the pruning took.

    python -m experiments.hook_user_spaces [--raw experiments/results/raw/hook_user_spaces]
        [--call call1_<commit> call2_<commit>] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from experiments import harness  # noqa: E402

QUESTION = "hook_user_spaces"
RAW = harness.RAW / QUESTION
ORDER = ["stage1", "two_stage", "two_stage:w0", "two_stage:no_ir", "two_stage:ours",
         "autotune:stage1", "autotune:two_stage"]


def all_calls(raw: Path) -> list[str]:
    """The suffixes of every call's files (``methods_<call>.jsonl``), oldest first by call
    number."""
    calls = sorted((p.stem.removeprefix("methods_") for p in raw.glob("methods_*.jsonl")),
                   key=_call_number)
    if not calls:
        raise SystemExit(f"{QUESTION}: no methods_*.jsonl under {raw}")
    return calls


def _call_number(call: str) -> tuple[int, str]:
    """"call10_<commit>" -> (10, ...): call 10 is newer than call 9 (not between 1 and 2)."""
    head = call.split("_", 1)[0].removeprefix("call")
    return (int(head) if head.isdigit() else -1, call)


def load(raw: Path, calls: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every call's records, each (style, shape) from the newest call that measured it (a call
    that re-measured a shape supersedes the older one; scores are ratios inside one call)."""
    methods, spaces = [], []
    for call in calls:
        for name, frames in (("methods", methods), ("spaces", spaces)):
            df = pd.read_json(raw / f"{name}_{call}.jsonl", lines=True)
            df["shape"] = df["problem"].map(lambda p: "x".join(str(v) for v in p.values()))
            df["call"] = call
            frames.append(df)
    spaces_all = pd.concat(spaces, ignore_index=True)
    newest = spaces_all.groupby(["style", "shape"])["call"].last()
    out = []
    for df in (pd.concat(methods, ignore_index=True), spaces_all):
        keep = df["call"].to_numpy() == newest.reindex(
            pd.MultiIndex.from_frame(df[["style", "shape"]])).to_numpy()
        out.append(df[keep].reset_index(drop=True))
    return out[0], out[1]


def tables(methods: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    names = [m for m in ORDER if m in set(methods["method"])]
    per_shape = methods.pivot_table(index=["style", "shape"], columns=["method", "k"],
                                    values="score").reindex(columns=names, level=0)
    seconds = "prune_s" if "prune_s" in methods else None
    agg = {"mean": ("score", "mean"), "min": ("score", "min"),
           "shapes": ("score", "size")}
    if seconds:
        agg["prune_s_max"] = (seconds, "max")
    summary = methods.groupby(["method", "k"]).agg(**agg).reset_index()
    summary["method"] = pd.Categorical(summary["method"], names, ordered=True)
    return per_shape, summary.sort_values(["method", "k"])


def report(methods: pd.DataFrame, spaces: pd.DataFrame, raw: Path = RAW) -> list[str]:
    per_shape, summary = tables(methods)
    methods = methods.assign(configs=methods["kept"].map(
        lambda k: len(k) if isinstance(k, list) else None))
    measured_n = (methods.groupby(["method", "k"])["configs"].mean().unstack("k")
                  .reindex([m for m in ORDER if m in set(methods["method"])]))
    measured_n.columns = [f"k={k}" for k in measured_n.columns]
    gpus = ", ".join(sorted(spaces["gpu"].dropna().astype(str).unique())) or "GPU unknown"
    flat = per_shape.copy()
    flat.columns = [f"{m} k={k}" for m, k in flat.columns]
    kernels = (methods[methods["method"] == "two_stage"].groupby("style")["stage2_kernel"]
               .first().fillna("-"))
    replaced = methods[methods["replaced"].map(lambda r: bool(r) if isinstance(r, dict)
                                               else False)] if "replaced" in methods else []
    measured = []
    for call in sorted(spaces["call"].unique(), key=_call_number):
        rows = spaces[spaces["call"] == call]
        first = rows.iloc[0]
        measured.append(
            f"- Measured in device call `{call}` ({', '.join(sorted(rows['style'].unique()))}): "
            f"{first.get('gpu')}, torch {first.get('torch')}, triton {first.get('triton')}, "
            f"costtune {str(first.get('costtune_commit'))[:7]}, {first.get('date')}.")
    lines = [f"# The hook on kernels written outside the project ({gpus})", "", *measured,
             "- Command: `COSTTUNE_COMMIT=<commit> bash "
             "experiments/device/call_hook_spaces_h200.sh` "
             "(`experiments/device/hook_user_spaces_h200.py`, `--styles` to measure some); "
             f"raw records in `{harness.relative(raw)}/`, one pair of files per call; each "
             "(style, shape) is reported from the newest call that measured it.",
             harness.provenance(), "",
             "Kernels in the styles of Triton's tutorials 02 (softmax), 03 (matmul, the "
             "328-config list), 06 (fused attention, descriptors set in a pre_hook), 09 (TMA "
             "persistent matmul), a persistent fused attention, Inductor's softmax, matmul "
             "and addmm templates and flash-attn's forward (`experiments/user_kernels.py`), a "
             "grouped-query and a sliding-window attention (`experiments/"
             "user_kernels_variants.py`; shapes B x H x Hkv x S x D x causal and B x H x S x D "
             "x causal x window; the window is read with a doubt, so the hook keeps 4k of it), "
             "none in any training data. Each list timed whole (CUDA-graph replay, L2 flushed, "
             "every config compiled first), then each method's kept list scored: best time of "
             "the list / best time among the kept (1.0: the best was kept; 0: only configs that "
             "cannot run were kept). `stage1`: the default hook (static features); `two_stage`: "
             "compiled features of the user's own kernel at each config, blended at the "
             "shipped stage-1 weight; `two_stage:w0`: the compiled booster alone; "
             "`two_stage:no_ir`: the booster for all families without IR counts "
             "(`h200_compiled`; GEMM's stage 2 before 2026-12-07's `h200_compiled_gemm`); "
             "`two_stage:ours`: compiled features of costtune's own kernel of the family (the "
             "hook before 2026-12-02); `autotune:*`: a fresh `triton.autotune` with the hook, "
             "scored by the config Triton picked (the hook's precompile replaces kept configs "
             "that cannot launch).", "",
             "## Summary over shapes", "", harness.md_table(summary, floatfmt=".3f"), "",
             "Configs each method kept, mean over shapes (the hook keeps more than k where "
             "the model may not apply: an untrained value, a doubt, another GPU than the "
             "model's):", "", harness.md_table(measured_n.reset_index(), floatfmt=".1f"), "",
             "## Per shape", "", harness.md_table(flat.reset_index(), floatfmt=".3f"), "",
             "Stage 2 compiled: " + ", ".join(f"{s} {v}" for s, v in kernels.items()) + ".", ""]
    if len(replaced):
        lines += ["Kept configs the hook replaced (they cannot launch):", ""]
        lines += [f"- {r.style} {r.shape} {r.method} k={r.k}: " + "; ".join(
            f"{c} ({why})" for c, why in r.replaced.items()) for r in replaced.itertuples()]
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", type=Path, default=RAW)
    ap.add_argument("--call", nargs="+", default=None,
                    help="which calls' files (default: every call under --raw)")
    ap.add_argument("--out", type=Path, default=None, help="results folder")
    args = ap.parse_args(argv)
    methods, spaces = load(args.raw, sorted(args.call, key=_call_number) if args.call
                           else all_calls(args.raw))
    lines = report(methods, spaces, args.raw)
    per_shape, _ = tables(methods)
    flat = per_shape.copy()
    flat.columns = [f"{m} k={k}" for m, k in flat.columns]
    md = harness.write_report(QUESTION, lines, flat.reset_index(), out=args.out)
    print("\n".join(lines))
    print(f"wrote {harness.relative(md)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
