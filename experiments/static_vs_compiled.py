"""Research question 2: do compiled features (registers, spills, PTX/SASS counts) help the model?

Ablation ``xgb:static`` vs ``xgb:static+compiled`` (same parameters: rank:pairwise, 300 trees,
per family) with ``costtune.evaluate.protocols`` under protocols "split" and "kfold", for each
family whose compiled features exist: ``<dataset>/features.parquet`` (all families) or
``<dataset>/features_<kernel>.parquet``. A family's table counts only when >= 90% of its rows
compiled (an interrupted computation leaves rows with a tooling error, not a real one).
Exits with status 3 and a message naming what is missing when no family qualifies.
Writes experiments/results/static_vs_compiled.{md,csv}.

    python -m experiments.static_vs_compiled [--dataset datasets/h200]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from costtune.evaluate import evaluate
from costtune.features import feature_table_paths
from costtune.model import CostModel
from experiments import harness

KS = (1, 2, 4, 8, 16)
MIN_COMPILED = 0.9
MODELS = ("xgb:static", "xgb:static+compiled")
SKIPPED = 3  # exit status: inputs missing, nothing measured
WHY_MISSING = ("compiled features are computed once per dataset with `costtune features` "
               "(~1-2 CPU-s per distinct sm_90 compile; experiments/results/features_cost.md)")


def compute_command(dataset: Path, kernel: str | None) -> str:
    if kernel is None:
        return f"costtune features --dataset {dataset}"
    return (f"costtune features --dataset {dataset / kernel} "
            f"--out {dataset / f'features_{kernel}.parquet'}")


def find_tables(df: pd.DataFrame, dataset: Path) -> tuple[dict[str, pd.DataFrame], list[str]]:
    """Per family, a usable compiled-feature table; and one line per family without one."""
    usable, notes = {}, []
    for kernel in sorted(df["kernel"].unique()):
        rows = df[df["kernel"] == kernel][["workload", "config"]]
        candidates = feature_table_paths(dataset, kernel)
        found = [p for p in candidates if p.exists()]
        if not found:
            notes.append(f"- {kernel}: no compiled features (looked for "
                         f"{', '.join(f'`{p}`' for p in candidates)}); compute with "
                         f"`{compute_command(dataset, kernel)}` or, for every family, "
                         f"`{compute_command(dataset, None)}`.")
            continue
        table = pd.read_parquet(found[0])
        if "compile_status" not in table.columns:
            notes.append(f"- {kernel}: `{found[0]}` has no compiled features (static only).")
            continue
        joined = rows.merge(table, on=["workload", "config"], how="left")
        ok = float((joined["compile_status"] == "ok").mean())
        if ok < MIN_COMPILED:
            errors = joined.loc[joined["compile_status"] != "ok", "compile_error"]
            top = errors.fillna("(row absent from the table)").astype(str).str[:90]
            notes.append(f"- {kernel}: `{found[0]}` compiled only {ok:.0%} of {len(rows)} rows "
                         f"(most common error: {top.value_counts().index[0]!r}); recompute "
                         f"with `{compute_command(dataset, kernel)}`.")
            continue
        usable[kernel] = table
        notes.append(f"- {kernel}: `{found[0]}`, {ok:.1%} of {len(rows)} rows compiled "
                     "(failed compiles keep NaN compiled features and compile_ok = 0).")
    return usable, notes


def run(df: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    records = []
    for kernel, table in tables.items():
        data = df[df["kernel"] == kernel]
        models = {name: CostModel(features=name.split(":")[1]) for name in MODELS}
        for protocol in ("split", "kfold"):
            result = evaluate(data, protocol=protocol, models=models, compiled=table, ks=KS)
            for name, metrics in result["scores"][kernel].items():
                records.append({"kernel": kernel, "protocol": protocol, "name": name,
                                **{m: metrics.get(m, float("nan")) for m in
                                   [f"top{k}" for k in KS] + ["worst8", "kendall_tau"]}})
    return pd.DataFrame(records)


def write(md: list[str], table: pd.DataFrame | None = None) -> None:
    harness.write_report("static_vs_compiled", md, table)
    print("\n".join(md))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", type=Path, default=harness.DATASET)
    args = ap.parse_args()
    df = harness.load_dataset(args.dataset)
    tables, notes = find_tables(df, args.dataset)
    md = ["# Static vs static+compiled features", "",
          harness.provenance(dataset=args.dataset, n_rows=len(df))]
    if not tables:
        md += ["- **Not run: no family has compiled features.** Nothing was measured.", "",
               "## Families", "", *notes, "", f"Why: {WHY_MISSING}.", ""]
        write(md)
        (harness.RESULTS / "static_vs_compiled.csv").unlink(missing_ok=True)  # no stale numbers
        print(f"static_vs_compiled: skipped, no usable compiled features for "
              f"{', '.join(sorted(df['kernel'].unique()))}; compute them with "
              f"`{compute_command(args.dataset, None)}` (one family: "
              f"`{compute_command(args.dataset, 'attention')}`)", file=sys.stderr)
        sys.exit(SKIPPED)
    table = run(df, tables)
    covered = ", ".join(tables)
    md += [f"- Measured: TenSet top-k score of `{MODELS[0]}` vs `{MODELS[1]}` (rank:pairwise, "
           f"300 trees, per family) for **{covered}** only, under `split` (train suite -> "
           "test suite) and `kfold` (grouped 5-fold over shapes, all workloads scored "
           "out of fold). Compiled features come from an AOT compile for sm_90 on the CPU "
           "(no GPU); timings are the dataset's. Not measured: families without compiled "
           f"features (below), and the cost of computing them.", "",
           "## Families", "", *notes, "",
           f"Why not every family: {WHY_MISSING}." if len(tables) < df["kernel"].nunique()
           else "", ""]
    for protocol, part in table.groupby("protocol", sort=False):
        md += [f"## {protocol}", "", harness.md_table(part.drop(columns="protocol"),
                                                      floatfmt=".3f"), ""]
    delta = table[table["name"].isin(MODELS)].pivot_table(
        index=["kernel", "protocol"], columns="name",
        values=["top1", "top8", "worst8", "kendall_tau"])
    lines = []
    for (kernel, protocol), r in delta.iterrows():
        lines.append(f"- {kernel}, {protocol}: top1 {r[('top1', MODELS[0])]:.3f} -> "
                     f"{r[('top1', MODELS[1])]:.3f}, top8 {r[('top8', MODELS[0])]:.3f} -> "
                     f"{r[('top8', MODELS[1])]:.3f}, worst8 {r[('worst8', MODELS[0])]:.3f} -> "
                     f"{r[('worst8', MODELS[1])]:.3f}, Kendall tau "
                     f"{r[('kendall_tau', MODELS[0])]:.3f} -> {r[('kendall_tau', MODELS[1])]:.3f} "
                     "(static -> static+compiled).")
    md += ["## Effect of compiled features", "", *lines, "",
           "Differences below ~2% are within the dataset's timing noise (DATASHEET). Where "
           "static features alone already score ~0.99+ at k=1, top-k scores have no room to "
           "show a gain and worst8 hinges on one workload; the mean per-workload Kendall tau "
           "(agreement of the whole ranking with the measured order) is the more sensitive "
           "comparison.", ""]
    write(md, table)


if __name__ == "__main__":
    main()
