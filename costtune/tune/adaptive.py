"""An adaptive budget for one tuning call: benchmark in model order, stop when the model is
confident, extend along the measured best's neighbours when the measurements disagree with it.

``Adaptive(max_configs=16)`` (or ``budget="adaptive"``) on ``costtune.autotune`` replaces the
fixed ``top_k``: configs are benchmarked one at a time, best-predicted first, until

- *confident*: at least ``min_configs`` (default 2) ran and the measured best's score
  exceeds the next unmeasured config's score by ``margin`` (scores standardized over the
  call's configs, so the margin reads in standard deviations of the model's scores, the same
  for every workload); or
- *cap*: ``max_configs`` configs ran (failing configs are replaced and do not count); or
- every config ran.

When a config measures faster than every earlier one but the model ranked it below the
config it beats (the measured order disagrees with the predicted one), the measured best's
neighbours (one parameter one step on the config list's own grid, ``ConfigSpace.neighbors``)
are benchmarked next, best-predicted first, before the model's order resumes.

The margin is calibrated by replay (``calibrate``): for each family, the shipped model ranks
the H200 dataset's *test-suite* workloads (shapes it never trained on), the loop above runs on
the recorded times for a grid of margins, and the smallest margin whose TenSet score (sum of
best times / sum of the best times found) reaches ``target`` is kept. The result ships as
``costtune/models/adaptive_h200.json``, regenerated with::

    python -m costtune.tune.adaptive datasets/h200 --out costtune/models/adaptive_h200.json

``Adaptive(margin=...)`` overrides it; a family the file lacks uses ``DEFAULT_MARGIN``.
The plain ``prune_configs_by`` hook keeps its fixed ``top_k``: Triton benchmarks the list it
is given, so only ``costtune.autotune`` (which owns the benchmark loop) can adapt.

>>> times = [3.0, 1.0, 2.0, 5.0]   # the model ranks 0 first, but 1 is fastest
>>> r = search([4.0, 3.0, 2.0, 1.0], lambda i: times[i], budget=Adaptive(max_configs=3),
...            margin=2.0, neighbours=lambda i: [])
>>> r.measured, r.best, r.stop
([0, 1, 2], 1, 'cap')
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Adaptive", "AdaptiveResult", "calibrate", "load_margins", "margin_for",
           "neighbour_finder", "parse_budget", "search"]

FILE_NAME = "adaptive_h200.json"
DEFAULT_MARGIN = 1.0  # standard deviations; used where no calibration exists
MARGIN_GRID = (*(round(x, 2) for x in np.arange(0.0, 0.1, 0.01)),
               *(round(x, 2) for x in np.arange(0.1, 3.01, 0.05)), math.inf)


@dataclass(frozen=True)
class Adaptive:
    """The adaptive budget: at most ``max_configs`` benchmarked (failing configs are replaced
    and not counted; where the hook doubts its reading of the launch, the cap widens as a fixed
    ``top_k`` does, ``widen`` x, and every config up to it runs), at least ``min_configs``
    (default: 2, or ``max_configs`` when smaller); ``margin`` in standard deviations of the
    scores (None: the calibrated one); ``neighbours``: extend along the measured best's
    neighbours on disagreement."""

    max_configs: int = 16
    min_configs: int | None = None  # 2: one comparison, what lets a disagreement show
    margin: float | None = None
    neighbours: bool = True

    def __post_init__(self) -> None:
        for name in ("max_configs", "min_configs"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, numbers.Integral)):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
        if self.max_configs < 1:
            raise ValueError(f"max_configs must be >= 1, got {self.max_configs!r}")
        object.__setattr__(self, "max_configs", int(self.max_configs))
        low = min(2, self.max_configs) if self.min_configs is None else int(self.min_configs)
        if not 1 <= low <= self.max_configs:
            raise ValueError(f"min_configs must be between 1 and max_configs "
                             f"({self.max_configs}), got {self.min_configs!r}")
        object.__setattr__(self, "min_configs", low)
        if self.margin is not None and (isinstance(self.margin, bool)
                                        or not isinstance(self.margin, numbers.Real)
                                        or not self.margin >= 0):
            raise ValueError(f"margin must be a number >= 0 or None, got {self.margin!r}")
        if not isinstance(self.neighbours, bool):
            raise ValueError(f"neighbours must be True or False, got {self.neighbours!r}")


@dataclass
class AdaptiveResult:
    """What one adaptive loop did: positions measured (in order), their times, the fastest,
    why it stopped ("confident", "cap", "exhausted") and how many came from neighbours."""

    measured: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    best: int | None = None
    stop: str = "exhausted"
    extended: int = 0
    failed: list[int] = field(default_factory=list)


def parse_budget(budget: Any) -> Adaptive | None:
    """None (a fixed top_k), "adaptive" (the defaults), a mapping of ``Adaptive`` fields or an
    ``Adaptive``; anything else raises ValueError."""
    if budget is None or isinstance(budget, Adaptive):
        return budget
    if budget == "adaptive":
        return Adaptive()
    if isinstance(budget, Mapping):
        unknown = sorted(set(budget) - set(Adaptive.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown adaptive budget option(s) {unknown}; use "
                             f"{sorted(Adaptive.__dataclass_fields__)}")
        return Adaptive(**budget)
    raise ValueError(f"budget must be None, 'adaptive', a dict or costtune.Adaptive, "
                     f"got {budget!r}")


def search(scores: Sequence[float], measure: Callable[[int], float], *, budget: Adaptive,
           margin: float | None, neighbours: Callable[[int], Sequence[int]]) -> AdaptiveResult:
    """Run the loop over positions ``0..n-1`` (``scores[i]``: higher = predicted faster;
    ``measure(i)``: time, ``inf`` when the config fails); ``margin=None`` never stops early."""
    s = np.asarray(scores, dtype=float)
    n = len(s)
    spread = float(np.nanstd(s)) if n > 1 else 0.0
    z = (s - np.nanmean(s)) / spread if spread > 0 else np.zeros(n)
    z = np.where(np.isnan(z), -np.inf, z)
    order = [int(i) for i in np.lexsort((np.arange(n), -z))]
    done: set[int] = set()
    extra: list[int] = []
    out = AdaptiveResult()
    best_time, cursor = math.inf, 0
    while len(out.measured) < budget.max_configs:
        if extra:
            i = extra.pop(0)
            out.extended += 1
        else:
            while cursor < n and order[cursor] in done:
                cursor += 1
            if cursor == n:
                out.stop = "exhausted"
                break
            i = order[cursor]
        done.add(i)
        t = float(measure(i))
        if not math.isfinite(t):
            out.failed.append(i)
            continue
        out.measured.append(i)
        out.times.append(t)
        if t < best_time:
            disagrees = out.best is not None and z[i] < z[out.best]
            best_time, out.best = t, i
            if disagrees and budget.neighbours:
                near = [j for j in neighbours(i) if j not in done and j not in extra]
                extra = sorted(near, key=lambda j: (-z[j], j)) + extra
        if margin is not None and len(out.measured) >= budget.min_configs and not extra:
            rest = [z[j] for j in order[cursor:] if j not in done]
            if not rest or z[out.best] - max(rest) >= margin:
                out.stop = "confident" if rest else "exhausted"
                break
    else:
        out.stop = "cap"
    return out


def neighbour_finder(values: Sequence[Mapping[str, Any]]) -> Callable[[int], list[int]]:
    """For configs given as flat dicts (kwargs plus num_warps, num_stages): a function from a
    position to the positions of its neighbours in the list, one numeric parameter one step
    on the grid of the values the list holds (``ConfigSpace.neighbors``, restricted to the
    listed configs); other parameters must match."""
    from costtune.space import ConfigSpace

    frozen = [tuple(sorted((k, repr(v)) for k, v in d.items())) for d in values]
    index = {f: i for i, f in reversed(list(enumerate(frozen)))}

    def numeric(v: Any) -> bool:
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)

    def find(i: int) -> list[int]:
        mine = dict(values[i])
        names = sorted(k for k, v in mine.items() if numeric(v))
        if not names:
            return []
        fixed = {k: v for k, v in mine.items() if k not in names}
        grid = {}
        for name in names:
            seen = {d[name] for d in values if set(d) == set(mine) and numeric(d.get(name))}
            grid[name] = sorted(seen)

        def listed(c: dict) -> bool:
            return tuple(sorted((k, repr(v)) for k, v in {**c, **fixed}.items())) in index

        space = ConfigSpace(grid, constraints={"listed": listed})
        near = space.neighbors({k: mine[k] for k in names})
        keys = [tuple(sorted((k, repr(v)) for k, v in
                             {**fixed, **{n: c.as_dict()[n] for n in names}}.items()))
                for c in near]
        return [index[k] for k in keys if k in index and index[k] != i]

    return find


@lru_cache(maxsize=1)
def load_margins() -> dict[str, Any]:
    """The shipped calibration's ``families`` part ({} when absent)."""
    path = Path(str(resources.files("costtune") / "models" / FILE_NAME))
    if not path.exists():
        return {}
    return json.loads(path.read_text())["families"]


def margin_for(budget: Adaptive, family: str | None) -> float:
    """The margin a call uses: the budget's own, else the family's calibrated one."""
    if budget.margin is not None:
        return float(budget.margin)
    entry = load_margins().get(family or "")
    return float(entry["margin"]) if entry else DEFAULT_MARGIN


def replay_workload(rows: Any, scores: np.ndarray, *, budget: Adaptive,
                    margin: float | None, params: Sequence[str]) -> tuple[float, float, int]:
    """(best true time, best time found, configs benchmarked) of the loop replayed on one
    workload's recorded rows (``rows``: a DataFrame; failures count as failing configs)."""
    from costtune.evaluate.metrics import true_times

    times = true_times(rows)
    result = _replay(rows, times, scores, budget=budget, margin=margin, params=params)
    found = min(result.times) if result.times else math.inf
    return float(times.min()), found, len(result.measured) + len(result.failed)


def replay_search(rows: Any, scores: np.ndarray, *, budget: Adaptive, margin: float | None,
                  params: Sequence[str] | None = None) -> AdaptiveResult:
    """The loop replayed on one workload's recorded rows (positions into ``rows``), the
    recorded times answering each benchmark; ``params`` None: the family's tuning
    parameters (``search_params``)."""
    from costtune.evaluate.metrics import true_times

    return _replay(rows, true_times(rows), scores, budget=budget, margin=margin,
                   params=search_params(rows) if params is None else params)


def _replay(rows: Any, times: np.ndarray, scores: np.ndarray, *, budget: Adaptive,
            margin: float | None, params: Sequence[str]) -> AdaptiveResult:
    values = [{p: _native(v) for p, v in zip(params, rec) if not _missing(v)}
              for rec in rows[list(params)].itertuples(index=False, name=None)]
    return search(scores, lambda i: times[i], budget=budget, margin=margin,
                  neighbours=neighbour_finder(values))


def search_params(data: Any) -> list[str]:
    """The columns of ``data`` (one family's rows) a neighbour differs in by one step."""
    from costtune.tune.launch import FAMILY_PARAMS

    required, neutral = FAMILY_PARAMS[str(data["kernel"].iloc[0])]
    return [p for p in (*required, *neutral, "num_warps", "num_stages") if p in data]


def replay_table(data: Any, scores: np.ndarray, *, budget: Adaptive,
                 margins: Sequence[float | None]) -> Any:
    """Per margin: TenSet score and mean configs benchmarked of the loop replayed on every
    workload of ``data`` (one family's rows) with the model's ``scores`` of those rows."""
    import pandas as pd

    from costtune.evaluate.metrics import tenset_score, workload_positions

    params = search_params(data)
    data = data.reset_index(drop=True)
    groups = list(workload_positions(data).values())
    out = []
    for margin in margins:
        per = [replay_workload(data.iloc[pos], scores[pos], budget=budget, margin=margin,
                               params=params) for pos in groups]
        best, found, n = (np.array(x, dtype=float) for x in zip(*per))
        out.append({"margin": margin, "score": tenset_score(best, found),
                    "worst": float(np.min(np.where(np.isfinite(found), best / found, 0.0))),
                    "mean_configs": float(n.mean()), "max_configs": int(n.max()),
                    "workloads": len(groups)})
    return pd.DataFrame(out)


def calibrate(data: Any, scores: np.ndarray, *, target: float = 0.995,
              budget: Adaptive = Adaptive()) -> dict[str, Any]:
    """The smallest margin of ``MARGIN_GRID`` whose replayed TenSet score reaches ``target``
    (the largest, never stopping early, when none does), with its score and mean configs."""
    table = replay_table(data, scores, budget=budget, margins=MARGIN_GRID)
    ok = table[table["score"] >= target]
    pick = ok.iloc[0] if len(ok) else table.iloc[-1]
    return {"margin": float(pick["margin"]), "target": target,
            "score": float(pick["score"]), "worst": float(pick["worst"]),
            "mean_configs": float(pick["mean_configs"]), "max_configs": budget.max_configs,
            "workloads": int(pick["workloads"]),
            "reached": bool(len(ok))}


def _native(v: Any) -> Any:
    v = v.item() if hasattr(v, "item") else v
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def main(argv: Sequence[str] | None = None) -> int:
    """Calibrate the margin per family on the dataset's test suite; write the JSON."""
    parser = argparse.ArgumentParser(description="Calibrate the adaptive budget's margin.")
    parser.add_argument("dataset", help="dataset folder, e.g. datasets/h200")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--model", default="h200", help="model name or path (default h200)")
    parser.add_argument("--target", type=float, default=0.995, help="TenSet score to reach")
    parser.add_argument("--max-configs", type=int, default=16, help="the cap calibrated for")
    args = parser.parse_args(argv)
    from costtune.kernels import FAMILIES
    from costtune.model.features import attach_features
    from costtune.model.registry import load_model, score
    from costtune.store.dataset import load_dataset
    from costtune.tune.trained import _git_commit

    families = {}
    for family in FAMILIES:
        df = load_dataset(args.dataset, kernel=family)
        if "implementation" in df:  # the family's own kernel: the model's training kernel
            df = df[df["implementation"].fillna(family) == family]
        df = df[df["suite"] == "test"].reset_index(drop=True)
        if not len(df):
            continue
        model = load_model(args.model, family)
        s = score(model, attach_features(df, features=model.features))
        families[family] = calibrate(df, s, target=args.target,
                                     budget=Adaptive(max_configs=args.max_configs))
    doc = {"provenance": {"dataset": str(args.dataset), "model": args.model,
                          "suite": "test (shapes the shipped models never trained on)",
                          "git_commit": _git_commit(), "margin_grid": list(MARGIN_GRID[:-1]),
                          "command": "python -m costtune.tune.adaptive " + " ".join(
                              argv if argv is not None else __import__("sys").argv[1:])},
           "families": families}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    for family, entry in families.items():
        print(f"{family}: margin {entry['margin']:g} -> score {entry['score']:.4f}, "
              f"{entry['mean_configs']:.1f} configs on average (cap {entry['max_configs']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
