"""The config values the shipped models were trained on, and the doubt a config outside them
raises (warned once, like a problem size out of range; the pruner keeps its k best-ranked
trained configs and every untrained one it ranks above them, at most ``widen`` x k).

``costtune/models/trained_configs_h200.json`` holds, per family, every value each config
parameter took in the training rows of ``datasets/h200`` (the rows the shipped models learned
from) and the range of the accumulator elements per thread (tile / threads), so 256x256
tiles at 4 warps (512 per thread) count as unseen even though 256 was seen on each side, and
the most waves of programs (programs / SMs) a config splitting K was trained at, so a split of
a grid already many waves deep counts as unseen though its SPLIT_K value was trained. It is
generated, with its provenance, by::

    python -m costtune.tune.trained datasets/h200 --out costtune/models/trained_configs_h200.json

>>> cols = {"BLOCK_M": [512, 64], "BLOCK_N": [64, 64], "num_warps": [4, 4]}
>>> for why in unseen_values("gemm", cols, elems_per_thread=[512.0, 32.0])[0].split("; "):
...     print(why)
BLOCK_M=512 (trained: 32, 64, 128, 256)
512 accumulator elements per thread (trained: 4 to 256)
>>> trained = {"gemm": {"values": {"SPLIT_K": [1, 2, 4]}, "ranges": {"split_waves": [0.5, 2.0]}}}
>>> unseen_values("gemm", {"SPLIT_K": [4, 4, 1]}, waves=[31.0, 1.5, 31.0], trained=trained)
{0: 'SPLIT_K=4 over 31 waves of programs (trained splits: up to 2 waves)'}

"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["build", "config_doubts", "hook_order", "keep_untrained", "load_trained",
           "trusted_within", "unseen_values"]

FILE_NAME = "trained_configs_h200.json"
# Tile parameters and the problem size each tiles: a tile larger than the size and than any
# trained at that size (or a smaller one) masks work no training row masked so much.
TILE_SIZES = {"gemm": {"BLOCK_M": "M", "BLOCK_N": "N", "BLOCK_K": "K"},
              "softmax": {"BLOCK_N": "cols", "ROWS_PER_PROG": "rows"},
              "attention": {"BLOCK_M": "S", "BLOCK_N": "S"}}
_DERIVED = ("elems_per_thread",)
SPLIT_WAVES = "split_waves"  # the range of ``waves`` over training rows with SPLIT_K > 1
# Families whose stage-1 model learned every implementation (experiments/impl_descriptor.py).
ALL_IMPLEMENTATIONS = ("softmax", "attention", "gemm")


@lru_cache(maxsize=1)
def load_trained() -> dict[str, Any]:
    """The shipped trained-config file's ``families`` part ({} when absent)."""
    path = Path(str(resources.files("costtune") / "models" / FILE_NAME))
    if not path.exists():
        return {}
    return json.loads(path.read_text())["families"]


def unseen_values(family: str, columns: Mapping[str, Any], *,
                  elems_per_thread: Any = None, among: Sequence[int] | None = None,
                  trained: Mapping[str, Any] | None = None,
                  problem: Mapping[str, Any] | None = None, waves: Any = None
                  ) -> dict[int, str]:
    """{position: what the training data lacked} for the configs (``columns``: each config
    parameter as an array, one entry per config; ``among``: the positions to look at, default
    all) holding a value the family's training rows never had, e.g.
    "BLOCK_M=512 (trained: 32, 64, 128, 256)", or, given the ``problem``, a tile larger than
    the size and than any trained at a size this small ("BLOCK_N=8192 at cols=1000 (trained
    up to 1024)"), or, given the ``waves`` of programs, a split of K over more waves than any
    trained split. Empty for an unknown family."""
    trained = load_trained() if trained is None else trained
    known = trained.get(family)
    n = len(next(iter(columns.values()))) if columns else 0
    picks = np.arange(n) if among is None else np.asarray(among, dtype=int)
    if not known or not len(picks):
        return {}
    parts: dict[int, list[str]] = {}
    for name, values in known["values"].items():
        if name not in columns:
            continue
        v = np.asarray(columns[name], dtype=float)[picks]
        for j in np.flatnonzero(np.isfinite(v) & ~np.isin(v, values)):
            parts.setdefault(int(picks[j]), []).append(
                f"{name}={v[j]:g} (trained: {', '.join(map(str, values))})")
    lo, hi = known.get("ranges", {}).get("elems_per_thread", (-np.inf, np.inf))
    if elems_per_thread is not None:
        e = np.asarray(elems_per_thread, dtype=float)[picks]
        for j in np.flatnonzero(np.isfinite(e) & ((e < lo) | (e > hi))):
            parts.setdefault(int(picks[j]), []).append(
                f"{e[j]:g} accumulator elements per thread (trained: {lo:g} to {hi:g})")
    split_hi = known.get("ranges", {}).get(SPLIT_WAVES, (np.inf, np.inf))[1]
    if waves is not None and "SPLIT_K" in columns:
        w = np.asarray(waves, dtype=float)[picks]
        split = np.asarray(columns["SPLIT_K"], dtype=float)[picks]
        for j in np.flatnonzero((split > 1) & (w > split_hi)):
            parts.setdefault(int(picks[j]), []).append(
                f"SPLIT_K={split[j]:g} over {w[j]:.3g} waves of programs "
                f"(trained splits: up to {split_hi:.3g} waves)")
    for name, (dim, most) in _tile_limits(family, known, problem).items():
        if name in columns:
            v = np.asarray(columns[name], dtype=float)[picks]
            for j in np.flatnonzero(np.isfinite(v) & (v > most)):
                parts.setdefault(int(picks[j]), []).append(
                    f"{name}={v[j]:g} at {dim}={problem[dim]} (trained up to {most:g})")
    return {i: "; ".join(p) for i, p in sorted(parts.items())}


def _tile_limits(family: str, known: Mapping[str, Any], problem: Mapping[str, Any] | None
                 ) -> dict[str, tuple[str, float]]:
    """{parameter: (its problem size, the largest value trusted there)}: a tile over both the
    size (to the next power of two) and every value trained at that size or a smaller one
    masks work no training row masked so much (below every trained size, the size range
    doubt speaks too, and the smallest trained size's largest tile stands)."""
    if not problem:
        return {}
    out = {}
    for name, steps in known.get("tiles", {}).items():
        dim = TILE_SIZES[family][name]
        size = problem.get(dim)
        if not steps or not isinstance(size, (int, np.integer)) or isinstance(size, bool) \
                or size < 1:
            continue
        fits = [most for at, most in steps if at <= _next_pow2(int(size))] or [steps[0][1]]
        out[name] = (dim, float(max(*fits, _next_pow2(int(size)))))
    return out


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def config_doubts(family: str, columns: Mapping[str, Any], *, elems_per_thread: Any = None,
                  among: Sequence[int] | None = None, trained: Mapping[str, Any] | None = None,
                  problem: Mapping[str, Any] | None = None, waves: Any = None
                  ) -> list[tuple[str, str]]:
    """[("config", message)] when a config (of ``among``, default all) holds a value the
    training data never had (or a tile larger than trained at the ``problem``'s sizes); []
    otherwise."""
    return _doubt(family, unseen_values(family, columns, elems_per_thread=elems_per_thread,
                                        among=among, trained=trained, problem=problem,
                                        waves=waves))


def _doubt(family: str, unseen: Mapping[int, str]) -> list[tuple[str, str]]:
    """``config_doubts``' note for the untrained configs found (``unseen_values``)."""
    if not unseen:
        return []
    # Each value once, whichever configs hold it (configs share untrained values).
    values = list(dict.fromkeys(v for text in unseen.values() for v in text.split("; ")))
    shown = "; ".join(values[:5]) + ("; ..." if len(values) > 5 else "")
    return [("config", f"{len(unseen)} {family} config(s) with values outside the training "
             f"data rank among those kept: {shown}")]


def keep_untrained(family: str, columns: Mapping[str, Any], elems_per_thread: Any,
                   order: Sequence[int], *, k: int, cap: int,
                   trained: Mapping[str, Any] | None = None,
                   problem: Mapping[str, Any] | None = None, waves: Any = None
                   ) -> tuple[int, list[tuple[str, str]]]:
    """(how many of ``order`` (positions best first) to keep, the doubt to note): ``k`` when
    no config with untrained values ranks in the first ``k``; else enough that the ``k``
    best-ranked configs with trained values are kept and, besides them, every untrained one
    ranked above the last of them (the model cannot be trusted on those either way, so they
    are measured), at most ``cap``. ``trained``: as from ``trained_from_rows`` (default: the
    shipped file's). ``problem``: the launch's sizes, for tiles larger than trained there;
    ``waves``: each config's programs / SMs, for splits of K deeper than trained."""
    unseen = unseen_values(family, columns, elems_per_thread=elems_per_thread,
                           trained=trained, problem=problem, waves=waves)
    return _kept_count(family, order, unseen, k=k, cap=cap)


def trusted_within(family: str, columns: Mapping[str, Any], elems_per_thread: Any,
                   order: Sequence[int], *, k: int, cap: int,
                   trained: Mapping[str, Any] | None = None,
                   problem: Mapping[str, Any] | None = None, waves: Any = None
                   ) -> np.ndarray:
    """``order`` (positions best first) with its ``k`` best-ranked configs of trained values
    moved up, where needed, into the first ``cap``: untrained configs ranked above them keep
    their order and the places left, so the cap on untrained configs never crowds out every
    config the model can be trusted on. Unchanged when they already lie within it.

    >>> trusted_within("gemm", {"BLOCK_M": [512, 512, 512, 64]}, None, [0, 1, 2, 3], k=1,
    ...                cap=2).tolist()
    [0, 3, 1, 2]
    """
    unseen = unseen_values(family, columns, elems_per_thread=elems_per_thread,
                           trained=trained, problem=problem, waves=waves)
    return _trusted_first(order, unseen, k=k, cap=cap)


def hook_order(family: str, columns: Mapping[str, Any], elems_per_thread: Any,
               order: Sequence[int], *, k: int, cap: int,
               trained: Mapping[str, Any] | None = None,
               problem: Mapping[str, Any] | None = None, waves: Any = None
               ) -> tuple[np.ndarray, int, list[tuple[str, str]]]:
    """What the pruning hook measures of ``order``: (``trusted_within``'s order, how many of
    it ``keep_untrained`` keeps, the doubt to note), the untrained configs found once."""
    unseen = unseen_values(family, columns, elems_per_thread=elems_per_thread,
                           trained=trained, problem=problem, waves=waves)
    order = _trusted_first(order, unseen, k=k, cap=cap)
    return (order, *_kept_count(family, order, unseen, k=k, cap=cap))


def _trusted_first(order: Sequence[int], unseen: Mapping[int, str], *, k: int,
                   cap: int) -> np.ndarray:
    order = np.asarray(order, dtype=int)
    trusted = [int(j) for j in order if int(j) not in unseen][:k]
    if not unseen or set(trusted) <= {int(j) for j in order[:cap]}:
        return order
    others = [int(j) for j in order[:cap] if int(j) in unseen][:max(0, cap - len(trusted))]
    first = {*trusted, *others}
    return np.array([j for j in order if int(j) in first]
                    + [j for j in order if int(j) not in first], dtype=int)


def _kept_count(family: str, order: Sequence[int], unseen: Mapping[int, str], *, k: int,
                cap: int) -> tuple[int, list[tuple[str, str]]]:
    if not unseen or not any(int(j) in unseen for j in order[:k]):
        return k, []
    trusted, grown = 0, cap
    for pos, j in enumerate(order[:cap]):
        trusted += int(j) not in unseen
        if trusted == k:
            grown = pos + 1
            break
    kept = {int(j) for j in order[:grown]}
    return grown, _doubt(family, {i: why for i, why in unseen.items() if i in kept})


def build(dataset: str | Path) -> dict[str, Any]:
    """Per family: trained values of each config parameter and the range of elements per
    thread, from the dataset's training rows with a time (status ok) that the hook's first
    stage learned from: every implementation for the families in ``ALL_IMPLEMENTATIONS``
    (their stage-1 model reads the kernel's source, ``h200_<family>``, shipped by
    experiments/impl_descriptor.py), else the family's original kernel (the others train only
    the compiled second stage, experiments/loio.py)."""
    from costtune.kernels import FAMILIES
    from costtune.store.dataset import load_dataset

    out: dict[str, Any] = {}
    for family in FAMILIES:
        df = load_dataset(dataset, kernel=family)
        df = df[(df["status"] == "ok") & (df["suite"] == "train")]
        if family not in ALL_IMPLEMENTATIONS:
            df = df[df["implementation"] == df["kernel"]]
        if len(df):
            out.update(trained_from_rows(df, family))
    return out


def trained_from_rows(rows: Any, family: str) -> dict[str, Any]:
    """{family: trained values and ranges} of dataset rows a model learned from (the file's
    ``families`` entry; a replay passes it as ``trained=`` for a model trained elsewhere)."""
    import pandas as pd

    from costtune.features.static import static_features
    from costtune.tune.launch import FAMILY_PARAMS

    required, neutral = FAMILY_PARAMS[family]
    names = [*required, *neutral, "num_warps", "num_stages"]
    values = {n: sorted(int(v) for v in rows[n].dropna().unique()) for n in names if n in rows}
    feats = static_features(rows)
    ranges = {c: [float(feats[c].min()), float(feats[c].max())] for c in _DERIVED}
    if "SPLIT_K" in rows:
        split = feats["waves"][pd.to_numeric(rows["SPLIT_K"], errors="coerce").to_numpy() > 1]
        if len(split):
            ranges[SPLIT_WAVES] = [float(split.min()), float(split.max())]
    tiles = {}
    for name, dim in TILE_SIZES[family].items():
        if name in rows and dim in rows:
            both = rows[[name, dim]].dropna().astype(int)
            at = both[dim].map(_next_pow2)
            most = both[name].groupby(at).max().sort_index().cummax()
            tiles[name] = [[int(a), int(m)] for a, m in most.items()]
    return {family: {"values": values, "ranges": ranges, "tiles": tiles,
                     "rows": int(len(rows))}}


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the trained config values file.")
    parser.add_argument("dataset", help="dataset folder, e.g. datasets/h200")
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    from costtune.model.xgb import dataset_hash
    from costtune.store.dataset import load_dataset

    families = build(args.dataset)
    rows = load_dataset(args.dataset)
    doc = {"provenance": {
        "dataset": str(args.dataset), "rows": int(len(rows)),
        "train_rows_ok": {f: v["rows"] for f, v in families.items()},
        "dataset_hash": dataset_hash(rows), "git_commit": _git_commit(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m costtune.tune.trained " + " ".join(sys.argv[1:] if argv is None
                                                                  else argv)},
        "families": families}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    counts = ", ".join(f"{f} {v['rows']} rows" for f, v in families.items())
    print(f"wrote {args.out}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
