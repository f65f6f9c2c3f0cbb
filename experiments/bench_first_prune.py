"""How long does a fresh process's first pruning call take, with and without the preload?

Each run is a fresh Python process that imports torch, triton and costtune, decorates a GEMM
kernel's 1,000 configs (``costtune.prune_configs_by(..., preload=...)``, the moment a kernel
module is imported), then sets itself up -- nothing, an idle wait (data loading, CUDA init),
or a fixed amount of torch CPU work (model building) -- and then makes the first tuning call's
pruning exactly as Triton does. Reports the first call's milliseconds and the setup's seconds
(so a preload that slowed the setup down would show). CPU-only: the hook runs on the host CPU.
Each run's table is kept in results/raw/first_prune/<cpu>_<date>.csv; writes
experiments/results/first_prune.{md,csv} (this run, and every recorded run).

    python -m experiments.bench_first_prune [--repeats 3] [--setup-s 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from experiments import harness

CHILD = r"""
import json, sys, time, warnings
import torch, triton
import costtune
mode, setup_s, preload = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
gemm = costtune.get_family("gemm")
configs = [c.to_triton() for c in gemm.config_space().sample(1000, seed=0)]
warnings.simplefilter("ignore")
prune = costtune.prune_configs_by("h200", 8, family="gemm", preload=preload)[
    "early_config_prune"]
t0 = time.perf_counter()
if mode == "idle":
    time.sleep(setup_s)
elif mode == "busy":  # a fixed amount of torch CPU work, about setup_s long on its own
    x = torch.randn(512, 512)
    for _ in range(int(setup_s * 400)):
        x = torch.tanh(x @ x.T / 512)
t1 = time.perf_counter()
s = {"M": 512, "N": 4608, "K": 3584}
grid = lambda meta: (triton.cdiv(s["M"], meta["BLOCK_M"]) * triton.cdiv(s["N"], meta["BLOCK_N"]),
                     meta["SPLIT_K"])
prune(configs, {"a_ptr": torch.empty(1, dtype=torch.float16), **s}, grid=grid, warmup=False)
t2 = time.perf_counter()
print("RESULT " + json.dumps({"setup_s": t1 - t0, "first_ms": (t2 - t1) * 1e3,
                              "kept": len(prune.last.kept)}))
"""


def child(mode: str, setup_s: float, preload: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(harness.ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TRITON_INTERPRET", None)
    res = subprocess.run([sys.executable, "-c", CHILD, mode, str(setup_s),
                          "1" if preload else "0"], capture_output=True, text=True, env=env,
                         timeout=300)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    if res.returncode or not lines:
        raise RuntimeError(res.stderr[-1000:])
    return json.loads(lines[-1][7:])


def measure(*, repeats: int, setup_s: float) -> pd.DataFrame:
    """Per setup and preload: median setup seconds and first-call ms over ``repeats``
    processes, with every run's ms."""
    rows = []
    for mode in ("none", "idle", "busy"):
        # Alternate with and without, so drift on a shared machine hits both alike.
        both = [[child(mode, setup_s, preload) for preload in (False, True)]
                for _ in range(repeats)]
        for preload in (False, True):
            runs = pd.DataFrame([pair[preload] for pair in both])
            row = {"setup": mode, "preload": preload, "setup_s": runs["setup_s"].median(),
                   "first_ms": runs["first_ms"].median(),
                   "first_ms_all": [round(v) for v in runs["first_ms"]]}
            rows.append(row)
            print(row, flush=True)
    return pd.DataFrame(rows)


def record(table: pd.DataFrame, args: argparse.Namespace) -> pd.DataFrame:
    """This run's rows with where and when they were measured (one raw file per run)."""
    env = harness.environment()
    return table.assign(first_ms_all=table["first_ms_all"].astype(str), date=env["date"],
                        costtune_commit=(env.get("costtune_commit") or "")[:7],
                        dirty=bool(env.get("costtune_dirty")), cores=os.cpu_count(),
                        repeats=args.repeats, setup_target_s=args.setup_s,
                        hostname=env["hostname"], command=harness.command())


def earlier_runs(raw: Path) -> pd.DataFrame:
    """Every recorded run (results/raw/first_prune/*.csv): first-call ms by setup/preload."""
    runs = pd.concat([pd.read_csv(p) for p in sorted(raw.glob("*.csv"))], ignore_index=True)
    runs["row"] = runs["setup"] + (" preload " + runs["preload"].map({True: "yes",
                                                                      False: "no"}))
    wide = runs.pivot_table(index=["date", "costtune_commit", "cores", "repeats"],
                            columns="row", values="first_ms", aggfunc="first")
    return wide.round(0).reset_index()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--setup-s", type=float, default=3.0)
    ap.add_argument("--out", type=Path, default=harness.RESULTS, help="folder of the report")
    args = ap.parse_args()
    table = record(measure(repeats=args.repeats, setup_s=args.setup_s), args)
    raw = args.out / "raw" / "first_prune"
    raw.mkdir(parents=True, exist_ok=True)
    table.to_csv(raw / f"cpu_{os.cpu_count()}cores_{table['date'][0][:16].replace(':', '')}.csv",
                 index=False)
    shown = table[["setup", "preload", "setup_s", "first_ms", "first_ms_all"]].assign(
        preload=table["preload"].map({True: "yes", False: "no"}),
        first_ms=table["first_ms"].round(0).astype(int)).rename(columns={
            "setup_s": "setup s", "first_ms": "first pruning call ms",
            "first_ms_all": "each run ms"})
    lines = [
        "# First pruning call in a fresh process (CPU measurement)", "",
        harness.provenance(), f"- CPU: {os.cpu_count()} cores visible.", "",
        "A fresh process decorates a GEMM kernel's 1,000 configs with "
        "`costtune.prune_configs_by(\"h200\", 8, family=\"gemm\", preload=...)`, sets itself "
        f"up, then prunes once as Triton's first tuning call would. Setup: `none`; `idle` "
        f"({args.setup_s:g} s wait: data loading, CUDA init); `busy` (a fixed amount of torch "
        f"CPU work, ~{args.setup_s:g} s alone). Medians of {args.repeats} processes per row, "
        "runs with and without the preload alternating.", "",
        "## This run", "", harness.md_table(shown, floatfmt=".2f"), "",
        "## Every run recorded (median first-call ms; results/raw/first_prune/)", "",
        harness.md_table(earlier_runs(raw), floatfmt=".0f"), ""]
    harness.write_report("first_prune", lines, table, out=args.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
