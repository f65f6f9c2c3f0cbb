"""Baselines the cost model must beat, each ranking the rows of one workload like ``CostModel``.

Every baseline has ``fit(data) -> self`` (a no-op for the ones that learn nothing) and
``rank(rows) -> np.ndarray``: positions into ``rows`` (one workload), best first. A ranking may
be shorter than the space and hold ``-1`` for a proposed config this workload has no row for
(see ``costtune.evaluate.metrics``).

- ``TritonTutorialList``: the CUDA configs of Triton's matmul tutorial (GEMM only).
- ``BestStaticList``: the k configs that best cover the training workloads, applied unchanged.
- ``RandomConfigs``: a random order; ``expected_random_scores`` gives its exact expectation.
- ``Roofline`` (``costtune.model.roofline``): analytical time from tiles, waves, FLOPs and bytes.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from costtune.evaluate.metrics import (
    DEFAULT_KS,
    true_times,
    workload_positions,
)
from costtune.hardware import H200
from costtune.model.roofline import Roofline

__all__ = ["TritonTutorialList", "BestStaticList", "RandomConfigs", "Roofline",
           "expected_random_scores", "TUTORIAL_FP16", "TUTORIAL_ALL"]

# triton python/tutorials/03-matrix-multiplication.py, get_cuda_autotune_config():
# (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages), in list order.
# The first 8 are the fp16 list; the tutorial appends 8 "good config for fp8 inputs".
TUTORIAL_FP16 = (
    (128, 256, 64, 8, 8, 3), (64, 256, 32, 8, 4, 4), (128, 128, 32, 8, 4, 4),
    (128, 64, 32, 8, 4, 4), (64, 128, 32, 8, 4, 4), (128, 32, 32, 8, 4, 4),
    (64, 32, 32, 8, 2, 5), (32, 64, 32, 8, 2, 5),
)
TUTORIAL_ALL = TUTORIAL_FP16 + (
    (128, 256, 128, 8, 8, 3), (256, 128, 128, 8, 8, 3), (256, 64, 128, 8, 4, 4),
    (64, 256, 128, 8, 4, 4), (128, 128, 128, 8, 4, 4), (128, 64, 64, 8, 4, 4),
    (64, 128, 64, 8, 4, 4), (128, 32, 64, 8, 4, 4),
)
_GEMM_PARAMS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}


class TritonTutorialList:
    """The tutorial's list, in its own order, mapped onto our GEMM space.

    Our kernel fixes GROUP_M = 8 (the tutorial's GROUP_SIZE_M) and adds SPLIT_K = 1. A list
    entry with no row in the workload is handled by ``missing``:

    - ``"nearest"`` (default): an entry whose shared memory (stages * (BM*BK + BK*BN) * itemsize)
      exceeds the sm_90 limit would fail with OutOfResources on the H200, so it becomes a wasted
      slot (-1). Any other absent entry (num_warps=2 is off our grid; a tile the workload's space
      prunes) is replaced by the nearest measured config of the workload not already proposed
      (L1 distance over log2 of BLOCK_*, num_warps and SPLIT_K, plus |stages difference| / 2;
      ties by config key).
    - ``"drop"``: every absent entry is a wasted slot.

    ``mapping(rows)`` shows what each entry became.

    >>> rows = pd.DataFrame({"kernel": "gemm", "dtype": "float16", "BLOCK_M": [128, 64],
    ...     "BLOCK_N": [128, 64], "BLOCK_K": [32, 32], "SPLIT_K": 1, "num_warps": 4,
    ...     "num_stages": 4, "config": ["c1", "c2"]})
    >>> TritonTutorialList(which="fp16", missing="drop").rank(rows).tolist()
    [-1, -1, 0, -1, -1, -1, -1, -1]
    """

    families = ("gemm",)

    def __init__(self, *, which: str = "fp16", missing: str = "nearest") -> None:
        if which not in ("fp16", "all"):
            raise ValueError(f"which must be 'fp16' or 'all', got {which!r}")
        if missing not in ("nearest", "drop"):
            raise ValueError(f"missing must be 'nearest' or 'drop', got {missing!r}")
        self.which = which
        self.missing = missing

    @property
    def entries(self) -> tuple[tuple[int, ...], ...]:
        return TUTORIAL_FP16 if self.which == "fp16" else TUTORIAL_ALL

    def fit(self, data: pd.DataFrame | None = None) -> TritonTutorialList:
        return self

    def rank(self, rows: pd.DataFrame) -> np.ndarray:
        return self.mapping(rows)["position"].to_numpy(dtype=int)

    def mapping(self, rows: pd.DataFrame) -> pd.DataFrame:
        """One row per list entry: its params, ``position`` in ``rows`` (-1: wasted slot),
        ``config`` proposed and ``how`` (exact, nearest, infeasible or absent)."""
        _check_family(rows, "gemm", "TritonTutorialList")
        params = rows[list(_GEMM_PARAMS)].to_numpy(dtype=float)
        keys = rows["config"].astype(str).to_numpy()
        itemsize = _ITEMSIZE.get(str(rows["dtype"].iloc[0]), 2)
        taken: set[int] = set()
        out = []
        for bm, bn, bk, _group, warps, stages in self.entries:
            want = np.array([bm, bn, bk, 1, warps, stages], dtype=float)
            exact = np.flatnonzero((params == want).all(axis=1))
            pos, how = -1, "absent"
            if len(exact) and exact[0] not in taken:
                pos, how = int(exact[0]), "exact"
            elif stages * (bm * bk + bk * bn) * itemsize > H200.max_shared_per_block:
                how = "infeasible"
            elif self.missing == "nearest":
                pos = _nearest(params, keys, want, taken)
                how = "nearest" if pos >= 0 else "absent"
            if pos >= 0:
                taken.add(pos)
            out.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps,
                        "num_stages": stages, "position": pos,
                        "config": keys[pos] if pos >= 0 else "", "how": how})
        return pd.DataFrame(out)


def _nearest(params: np.ndarray, keys: np.ndarray, want: np.ndarray, taken: set[int]) -> int:
    logs = np.log2(np.maximum(params[:, [0, 1, 2, 3, 4]], 1))
    dist = np.abs(logs - np.log2(want[[0, 1, 2, 3, 4]])).sum(axis=1)
    dist = dist + np.abs(params[:, 5] - want[5]) / 2
    dist[list(taken)] = np.inf
    dist[np.isnan(dist)] = np.inf
    if not np.isfinite(dist).any():
        return -1
    order = np.lexsort((keys, dist))
    return int(order[0])


class BestStaticList:
    """Best static top-k: per kernel family, the ``k`` configs chosen greedily on the training
    workloads to maximise ``sum_w max_{c in list} L*_w / t_w(c)`` (failures and absent configs
    count 0), then proposed unchanged on any workload. The greedy list is nested, so its first
    k entries are the greedy choice for every smaller k too. ``absent`` says what happens to an
    entry the workload has no row for (its space excludes that config): ``"waste"`` (default)
    keeps the list's positions, the entry is a wasted slot (-1) and top-k is the first k entries
    that exist; ``"skip"`` drops it, so top-k walks further down the list.

    >>> train = pd.DataFrame({"kernel": "gemm", "workload": ["a", "a", "b", "b"],
    ...     "config": ["x", "y", "x", "y"], "status": "ok", "time_ms": [1.0, 2.0, 3.0, 1.0]})
    >>> BestStaticList(k=2).fit(train).lists_["gemm"]  # y: 0.5 + 1, then x adds 0.5
    ['y', 'x']
    """

    def __init__(self, *, k: int = max(DEFAULT_KS), absent: str = "waste") -> None:
        if int(k) < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if absent not in ("waste", "skip"):
            raise ValueError(f"absent must be 'waste' or 'skip', got {absent!r}")
        self.k = int(k)
        self.absent = absent

    def fit(self, data: pd.DataFrame) -> BestStaticList:
        self.lists_: dict[str, list[str]] = {}
        for kernel, group in data.groupby("kernel", sort=True):
            self.lists_[str(kernel)] = greedy_cover(group, k=self.k)
        return self

    @property
    def families(self) -> tuple[str, ...]:
        """The kernel families it holds a list for (none before ``fit``)."""
        return tuple(getattr(self, "lists_", {}))

    def rank(self, rows: pd.DataFrame) -> np.ndarray:
        kernel = str(rows["kernel"].iloc[0])
        if kernel not in getattr(self, "lists_", {}):
            raise ValueError(f"BestStaticList was not fitted on kernel {kernel!r}")
        where = {k: i for i, k in enumerate(rows["config"].astype(str))}
        ranking = np.array([where.get(c, -1) for c in self.lists_[kernel]], dtype=int)
        return ranking[ranking >= 0] if self.absent == "skip" else ranking


def greedy_cover(data: pd.DataFrame, *, k: int) -> list[str]:
    """Greedy set cover of per-workload relative speed (see ``BestStaticList``); ties by key."""
    times = true_times(data)
    rel = pd.DataFrame({"workload": data["workload"].to_numpy(),
                        "config": data["config"].astype(str).to_numpy(), "t": times})
    best = rel.groupby("workload")["t"].transform("min")
    rel["speed"] = np.where(np.isfinite(rel["t"]) & np.isfinite(best), best / rel["t"], 0.0)
    table = rel.pivot_table(index="workload", columns="config", values="speed",
                            aggfunc="max", fill_value=0.0).sort_index(axis=1)
    matrix = table.to_numpy(dtype=float)
    configs = list(table.columns)
    chosen: list[str] = []
    covered = np.zeros(matrix.shape[0])
    for _ in range(min(k, len(configs))):
        gain = np.maximum(matrix, covered[:, None]).sum(axis=0)
        gain[[configs.index(c) for c in chosen]] = -np.inf
        j = int(np.argmax(gain))  # first max = smallest key: columns are sorted
        chosen.append(configs[j])
        covered = np.maximum(covered, matrix[:, j])
    return chosen


class RandomConfigs:
    """A uniformly random order of the workload's rows, reproducible by ``seed`` and workload.
    For scores use ``expected_random_scores`` (the expectation, not one draw).

    >>> rows = pd.DataFrame({"workload": "w", "config": list("abcd")})
    >>> sorted(RandomConfigs(seed=1).rank(rows).tolist())
    [0, 1, 2, 3]
    """

    def __init__(self, *, seed: int = 0) -> None:
        self.seed = int(seed)

    def fit(self, data: pd.DataFrame | None = None) -> RandomConfigs:
        return self

    def rank(self, rows: pd.DataFrame) -> np.ndarray:
        salt = zlib.crc32(str(rows["workload"].iloc[0]).encode())
        return np.random.default_rng([self.seed, salt]).permutation(len(rows))


def expected_random_scores(data: pd.DataFrame, *, ks: Sequence[int] = DEFAULT_KS,
                           worst: Sequence[int] = (8,), draws: int = 4000,
                           seed: int = 0) -> dict[str, float]:
    """Expected ``topk_scores`` of k configs drawn uniformly without replacement.

    Per workload the distribution of L(k) is exact: with times sorted ascending (failures last
    as inf), the best of k draws is the i-th smallest with probability C(n-i, k-1) / C(n, k).
    ``top{k}`` is the mean over ``draws`` joint samples from these exact distributions (the
    kernel score is not linear in L(k)); ``worst{k}`` is the lowest exact expected per-workload
    score.

    >>> df = pd.DataFrame({"kernel": "g", "workload": "w", "config": list("ab"),
    ...                    "status": "ok", "time_ms": [1.0, 2.0]})
    >>> {k: round(v, 2) for k, v in expected_random_scores(df, ks=(1, 2), worst=(1,)).items()}
    {'top1': 0.75, 'top2': 1.0, 'worst1': 0.75}
    """
    from scipy.special import comb

    rng = np.random.default_rng(seed)
    times = true_times(data)
    l_star, samples, means = [], {k: [] for k in ks}, {k: [] for k in ks}
    for pos in workload_positions(data).values():
        t = np.sort(times[pos])
        if not np.isfinite(t[0]):
            continue
        n = len(t)
        l_star.append(t[0])
        i = np.arange(1, n + 1)
        for k in ks:
            kk = min(k, n)
            p = comb(n - i, kk - 1) / comb(n, kk)
            p = p / p.sum()
            means[k].append(float(np.sum(p * np.where(np.isfinite(t), t[0] / t, 0.0))))
            samples[k].append(t[rng.choice(n, size=draws, p=p)])
    out: dict[str, float] = {}
    l_star_arr = np.array(l_star)
    for k in ks:
        if not l_star:
            out[f"top{k}"] = float("nan")
            continue
        lk = np.stack(samples[k])  # workloads x draws
        found = np.isfinite(lk)
        sums = np.where(found, lk, 0.0).sum(axis=0)
        star = (l_star_arr[:, None] * found).sum(axis=0)
        score = np.where(sums > 0, found.mean(axis=0) * star / np.where(sums > 0, sums, 1), 0.0)
        out[f"top{k}"] = float(score.mean())
    for k in worst:
        out[f"worst{k}"] = float(min(means[k])) if l_star else float("nan")
    return out


def _check_family(rows: pd.DataFrame, family: str, who: str) -> None:
    kernels = set(rows["kernel"].astype(str))
    if kernels != {family}:
        raise ValueError(f"{who} ranks {family} rows only, got kernel(s) {sorted(kernels)}")
