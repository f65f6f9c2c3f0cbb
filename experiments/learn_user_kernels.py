"""Research question: does ``learn=True`` make the later tuning calls of a user's kernel pick
faster configs? (issue 19; times measured on the H200, the tuning calls replayed on the CPU)

A user's program is replayed as a sequence of tuning calls of one kernel written outside the
project (Triton tutorials 02, 03, 06 and an Inductor softmax, ``experiments/user_kernels.py``),
one call per shape, in seeded orders. Each call goes through the public API as on a GPU:
``costtune.autotune(configs, key, top_k=k, learn=...)`` wrapping the user's ``@triton.jit``
kernel, launched with the shape's tensors (on the CPU), pruned by the hook, benchmarked,
learned from by ``learn=True`` into a fresh per-kernel folder (``COSTTUNE_HOME``), with two
stand-ins: the benchmark returns the time measured on the H200 for that config at that shape
(every config of each list was timed whole, ``experiments/device/hook_user_spaces_h200.py``:
``raw/hook_user_spaces/spaces_*`` and ``raw/learn_user_kernels/spaces_*``), the final
launch is skipped, and the launch reads the H200's 132 SMs (tutorial 02's persistent grid).
Nothing is recomputed from the dataset: the per-kernel model is the one the product writes.

Modes: ``shipped`` (learn=False), ``learn`` (learn=True: the shipped model refitted on its
training table plus the kernel's harvest), ``learn:continue`` (learn=True from a copy of the
shipped model without its table: trees added, what learn=True did before), ``learn:explore``
(learn=True, and the first call of the program benchmarks the whole list, ``top_k`` = the
list's length: one exhaustive call, then top_k=k). Score per call: best time of the list /
time of the config the tuner picked (1.0: the list's best).

    python -m experiments.learn_user_kernels [--seeds 3] [--ks 1 4 8] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from unittest import mock

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments import harness  # noqa: E402

QUESTION = "learn_user_kernels"
RAW = (harness.RAW / "hook_user_spaces", harness.RAW / QUESTION)
MODES = ("shipped", "learn", "learn:continue", "learn:explore")
MIN_SHAPES = 4


def spaces(raw: tuple[Path, ...] = RAW) -> dict[str, list[dict]]:
    """Per style, its measured shapes (the newest record of each): problem, times, provenance."""
    out: dict[str, dict[str, dict]] = {}
    for folder in raw:
        for path in sorted(folder.glob("spaces_*.jsonl")):
            for line in path.read_text().splitlines():
                r = json.loads(line)
                r["source"] = harness.relative(path)
                out.setdefault(r["style"], {})[json.dumps(r["problem"], sort_keys=True)] = r
    return {s: list(v.values()) for s, v in out.items()}


def without_table(family: str, folder: Path) -> str:
    """A copy of the shipped ``h200_<family>`` model without its training table: learn=True
    from it adds trees (continued training)."""
    from costtune.model.files import resolve

    json_path, _ = resolve(f"h200_{family}")
    stem = json_path.name[: -len(".json")]
    for part in json_path.parent.glob(f"{stem}.*"):
        if not part.name.endswith(".train.npz"):
            shutil.copy(part, folder / part.name)
    return str(folder / stem)


def tune(style, configs: list, record: dict, *, k: int, learn: bool, model: str) -> dict:
    """One tuning call through ``costtune.autotune``, benchmarked by the measured times."""
    import user_kernels
    from triton.runtime.autotuner import Autotuner

    import costtune

    times = record["times"]
    tuner = costtune.autotune(configs, key=list(style.key), family=style.family, top_k=k,
                              learn=learn, model=model, precompile=False)(style.kernel)
    # Every benchmark answers with the H200's time, the tuner's own (a config that could not
    # launch there is infinite and replaced by the next-ranked, as on the GPU) and Triton's.
    measured = mock.patch.object(Autotuner, "_bench",
                                 lambda self, *a, config, **m: [times[str(config)]] * 3)
    inputs = style.make_inputs(record["problem"], device="cpu", dtype=style.gpu_dtype)
    num_sms = user_kernels.num_sms
    # The launch reads the GPU it ran on (tutorial 02's persistent grid: 4 programs per SM),
    # and the kernel is not run after tuning (no GPU here); both undone after the call.
    user_kernels.num_sms = lambda device: int(record["sm_count"])
    tuner.fn.run = lambda *a, **kw: None
    start = time.perf_counter()
    try:
        with warnings.catch_warnings(), measured:
            warnings.simplefilter("ignore")
            style.launch(tuner, inputs)
            if tuner.learner is not None:
                tuner.learner.wait()  # the update runs in a thread: count it, as the next
                # call would wait for it
    finally:
        user_kernels.num_sms = num_sms
        del tuner.fn.run
    seconds = time.perf_counter() - start
    picked = times[str(tuner.best_config)]
    learned = tuner.learner.updated if tuner.learner is not None else []
    method = ""
    if learned:
        from costtune.model.learned import current_model

        method = str(current_model(learned[-1].parent)[1].get("method"))
    return {"score": min(times.values()) / picked, "benchmarked": len(tuner.configs_timings),
            "call_s": seconds, "learned": method,
            "skipped": "; ".join(tuner.learner.skipped) if tuner.learner is not None else ""}


def program(name: str, records: list[dict], *, mode: str, k: int, seed: int) -> list[dict]:
    """The seeded sequence of tuning calls of one style, in a fresh COSTTUNE_HOME."""
    from user_kernels import STYLES

    from experiments.device.hook_user_spaces_h200 import configs_of

    style, configs = STYLES[name], configs_of(name)
    order = np.random.default_rng(seed).permutation(len(records))
    out = []
    before = os.environ.get("COSTTUNE_HOME")
    with tempfile.TemporaryDirectory() as home:
        os.environ["COSTTUNE_HOME"] = home
        try:
            model = (without_table(style.family, Path(home)) if mode == "learn:continue"
                     else "h200")
            for position, i in enumerate(order):
                explore = mode == "learn:explore" and position == 0
                got = tune(style, configs, records[i], k=len(configs) if explore else k,
                           learn=mode != "shipped", model=model)
                out.append({"style": name, "mode": mode, "k": k, "seed": seed,
                            "position": position, "shape": "x".join(
                                str(v) for v in records[i]["problem"].values()),
                            "explore": explore, **got})
        finally:
            if before is None:
                os.environ.pop("COSTTUNE_HOME", None)
            else:
                os.environ["COSTTUNE_HOME"] = before
    return out


def report(table: pd.DataFrame, data: dict[str, list[dict]], seconds: float) -> list[str]:
    later = table[(table["position"] >= 2) & ~table["explore"]]
    summary = (later.groupby(["style", "k", "mode"])
               .agg(mean=("score", "mean"), min=("score", "min"), calls=("score", "size"),
                    call_s=("call_s", "median")).reset_index())
    overall = later.groupby(["k", "mode"]).agg(mean=("score", "mean"),
                                               min=("score", "min")).reset_index()
    by_position = table[~table["explore"]].pivot_table(index=["style", "k", "position"],
                                                       columns="mode", values="score")
    sources = sorted({r["source"] for rs in data.values() for r in rs})
    first = [r for rs in data.values() for r in rs]
    gpus = sorted({r.get("gpu") for r in first})
    dates = sorted(r.get("date", "")[:10] for r in first)
    commits = sorted({str(r.get("costtune_commit"))[:7] for r in first})
    return ["# learn=True on kernels written outside the project (replayed on H200 times)", "",
            f"- Times measured on {', '.join(map(str, gpus))} (torch "
            f"{first[0].get('torch')}, triton {first[0].get('triton')}), {dates[0]} to "
            f"{dates[-1]}, costtune {', '.join(commits)}: every config of each list timed whole "
            "(CUDA-graph replay, L2 flushed) by `experiments/device/hook_user_spaces_h200.py` "
            "(`--learn-shapes` for the added shapes); raw: " + ", ".join(
                f"`{s}`" for s in sources) + ".",
            harness.provenance(), "",
            "Each tuning call runs `costtune.autotune(configs, key, top_k=k, learn=...)` on the "
            "user's kernel with the shape's tensors, its benchmark answered by the measured "
            "times (the final launch skipped); `learn=True` writes the per-kernel model the "
            "product writes, read by the next call. Seeded orders of each style's shapes; "
            "score = best time of the list / time of the picked config. `shipped`: "
            "learn=False; `learn`: refit of the shipped model on its table plus the harvest "
            "(what ships); `learn:continue`: trees added (the shipped model without its "
            "table); `learn:explore`: learn=True whose first call benchmarks the whole list.",
            f"- Runtime {seconds:.0f} s on this machine.", "",
            "## After two or more earlier calls (positions 3+; explore's first call excluded)",
            "", harness.md_table(summary, floatfmt=".3f"), "",
            "## All styles", "", harness.md_table(overall, floatfmt=".3f"), "",
            "## Mean score by call position", "",
            harness.md_table(by_position.reset_index(), floatfmt=".3f"), ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--styles", nargs="*", default=None)
    ap.add_argument("--out", type=Path, default=None, help="results folder")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(harness.ROOT / "experiments"))
    data = {s: r for s, r in spaces().items() if len(r) >= MIN_SHAPES
            and (not args.styles or s in args.styles)}
    if not data:
        print(f"no style has {MIN_SHAPES} measured shapes under {[str(r) for r in RAW]}")
        return 3
    start = time.perf_counter()
    records = []
    for name, recs in data.items():
        for k in args.ks:
            for mode in args.modes:
                for seed in range(args.seeds):
                    records += program(name, recs, mode=mode, k=k, seed=seed)
                    print(f"{name} k={k} {mode} seed {seed}: mean "
                          f"{np.mean([r['score'] for r in records[-len(recs):]]):.3f}",
                          flush=True)
    table = pd.DataFrame(records)
    lines = report(table, data, time.perf_counter() - start)
    md = harness.write_report(QUESTION, lines, table, out=args.out)
    print("\n".join(lines))
    print(f"wrote {harness.relative(md)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
