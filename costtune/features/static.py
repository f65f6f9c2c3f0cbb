"""Static features: what a (problem, config) pair implies before anything is compiled.

Vectorised numpy over whole columns, so the autotune pruning hook can score ~1,000 configs in a
few milliseconds. Every family maps onto one tiled picture, so a name means the same thing in
every family (NaN where it does not apply):

============  ===================  ======================  =========================
generic       gemm                 softmax                 attention
============  ===================  ======================  =========================
size_m / n    M / N                rows / cols             S (queries) / S (keys)
size_k        K                    -                       D
batch         1                    1                       B*H
tile_m / n    BLOCK_M / BLOCK_N    ROWS_PER_PROG / BLOCK_N BLOCK_M / BLOCK_N
tile_k        BLOCK_K              -                       D (HEAD_DIM)
loop_trips    K tiles per split    chunks per row pass     KV blocks per query block
============  ===================  ======================  =========================

>>> import pandas as pd
>>> row = {"kernel": "gemm", "dtype": "float16", "M": 1000, "N": 1000, "K": 1000,
...        "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "SPLIT_K": 1,
...        "num_warps": 4, "num_stages": 3}
>>> float(static_features([row])["num_programs"].iloc[0])
64.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from costtune.hardware import H200
from costtune.kernels.base import FAMILIES, FLAG_KEYS, PROBLEM_COLUMNS
from costtune.types import Config

NUM_SMS = H200.num_sms
_SM_SHARED = H200.shared_per_sm
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float8_e4m3fn": 1,
                "float8_e5m2": 1, "float64": 8}
CONFIG_COLUMNS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "ROWS_PER_PROG", "num_warps",
                  "num_stages")
# Implementation knobs some kernels of the suite tune (0/1 flags, a group width): a feature
# each, NaN where a kernel has no such knob.
KNOB_COLUMNS = ("GROUP_SIZE_M", "WARP_SPECIALIZE", "EPILOGUE_SUBTILE", "FLATTEN")

STATIC_FEATURES: list[str] = [
    *(f"kernel_{f}" for f in FAMILIES), "dtype_bytes",
    *(f"log2_{k}" for k in PROBLEM_COLUMNS if k not in FLAG_KEYS), *sorted(FLAG_KEYS),
    "log2_size_m", "log2_size_n", "log2_size_k", "log2_batch",
    "log2_flops", "log2_min_bytes", "log2_problem_intensity",
    *(f"log2_{k}" for k in CONFIG_COLUMNS[:5]), "num_warps", "num_stages",
    "log2_tile_m", "log2_tile_n", "log2_tile_k",
    "num_programs", "log2_programs", "waves", "wave_efficiency",
    "pad_waste_m", "pad_waste_n", "pad_waste_k",
    "smem_bytes_est", "ctas_per_sm_est", "resident_waves", "tile_intensity",
    "loop_trips", "log2_tile_iters", "threads_per_program", "elems_per_thread",
    "log2_bytes_loaded", "load_amplification",
    *(f"knob_{k.lower()}" for k in KNOB_COLUMNS),
    "log2_launched", "launched_per_tile", "ctas_per_sm_launch", "warps_per_sm_launch",
]
# Programs the launch really starts (its grid), where that differs from the family's one
# program per tile: a persistent kernel launches min(C, tiles) programs that loop over the
# tiles. Dataset rows get it from their implementation's grid, harvested rows and the hook
# from the user's launch grid; absent, one program per tile.
LAUNCHED = "launched_programs"


def static_features(rows: pd.DataFrame | Sequence[dict[str, Any]], *,
                    num_sms: int = NUM_SMS) -> pd.DataFrame:
    """``STATIC_FEATURES`` for each row (dataset rows: kernel, dtype, problem sizes, config
    params). The result keeps the input's row order and index, led by ``workload`` and
    ``config`` when the input has them."""
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if "kernel" not in df.columns or "dtype" not in df.columns:
        raise ValueError("static_features needs 'kernel' and 'dtype' columns")
    cols = {c: _floats(df[c]) for c in (*PROBLEM_COLUMNS, *CONFIG_COLUMNS, *KNOB_COLUMNS,
                                         LAUNCHED) if c in df.columns}
    if "config" in df.columns and not all(c in df.columns for c in CONFIG_COLUMNS):
        # Params only in the canonical key string (e.g. a hand-made frame): parse each once.
        parsed = {k: parse_config_key(k).as_dict() for k in df["config"].unique()}
        for c in (*CONFIG_COLUMNS, *KNOB_COLUMNS):
            if c not in cols:
                cols[c] = np.array([_number(parsed[k].get(c, np.nan)) for k in df["config"]],
                                   float)
    if "implementation" in df.columns:
        _fill_implied(df, cols)
    dtype_bytes = _floats(df["dtype"].astype(str).map(_DTYPE_BYTES))
    feats = _compute(df["kernel"].astype(str).to_numpy(), dtype_bytes, cols, num_sms=num_sms)
    out = _frame(feats, index=df.index)
    for key in ("config", "workload"):
        if key in df.columns:
            out.insert(0, key, df[key].to_numpy())
    return out


def _fill_implied(df: pd.DataFrame, cols: dict[str, np.ndarray]) -> None:
    """Fill, in place, the family parameters that rows' implementations fix rather than tune
    (``implied_params``: a GEMM without split-K has SPLIT_K 1, a whole-row softmax BLOCK_N
    next_pow2(cols)), so every implementation is described in its family's terms, and the
    programs its grid launches (``LAUNCHED``: fewer than tiles for a persistent kernel)."""
    from costtune.kernels.base import family_of, get_implementation

    kernel = df["kernel"].astype(str).to_numpy()
    # A row without one (learn=True's rows beside a store's) is its kernel's own.
    impl = df["implementation"].astype(object).where(df["implementation"].notna(),
                                                     df["kernel"]).astype(str).to_numpy()
    n = len(df)
    owned: set[str] = set()
    for name in np.unique(impl[impl != kernel]):
        try:
            module = get_implementation(name)
        except ValueError:
            continue  # a user kernel's own name (harvest): nothing known about it
        family = family_of(name)
        rows = np.flatnonzero(impl == name)
        keys = [k for k in PROBLEM_COLUMNS if k in df.columns]
        sub = df.iloc[rows]
        memo: dict[tuple, dict[str, Any]] = {}
        for i, (prob, key) in zip(rows, zip(sub[keys].itertuples(index=False),
                                            sub["config"].astype(str), strict=True),
                                  strict=True):
            got = memo.get((prob, key))
            if got is None:
                problem = {k: v for k, v in zip(keys, prob, strict=True)
                           if k in _problem_keys(family)}
                config = parse_config_key(key)
                got = memo[(prob, key)] = {**module.implied_params(problem, config),
                                           LAUNCHED: _grid_programs(module, problem, config)}
            for param, value in got.items():
                if param not in owned:  # the frame's columns may be read-only views
                    owned.add(param)
                    cols[param] = np.array(cols.get(param, np.full(n, np.nan)), dtype=float)
                if np.isnan(cols[param][i]):
                    cols[param][i] = float(value)


def _grid_programs(module: Any, problem: dict[str, Any], config: Config) -> float:
    """Programs an implementation's launch starts (the product of its grid); NaN where the
    grid cannot be evaluated (a problem missing a size)."""
    try:
        return float(np.prod(module.grid({k: int(v) for k, v in problem.items()}, config)))
    except (ValueError, KeyError, TypeError):
        return np.nan


def _problem_keys(family: str) -> tuple[str, ...]:
    from costtune.kernels.base import PROBLEM_KEYS

    return PROBLEM_KEYS[family]


def config_columns(configs: Sequence[Any]) -> dict[str, np.ndarray]:
    """The config parameters of many configs as float columns (NaN where absent): the part
    of ``static_features_for`` that does not depend on the problem, for callers to reuse."""
    n = len(configs)
    dicts = [c if isinstance(c, dict) else _config_dict(c) for c in configs]
    return {k: np.fromiter((_number(d.get(k, np.nan)) for d in dicts), dtype=float, count=n)
            for k in (*CONFIG_COLUMNS, *KNOB_COLUMNS)}


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def static_features_for(kernel: str, problem: dict[str, Any], dtype: str,
                        configs: Sequence[Any], *, num_sms: int = NUM_SMS,
                        columns: dict[str, np.ndarray] | None = None,
                        programs_cap: float | None = None) -> pd.DataFrame:
    """Features of many configs (Config, triton.Config or flat dicts) for one problem: the
    pruning hook's call, without building a DataFrame row by row. ``columns``: the configs'
    ``config_columns``, when the caller keeps them across problems. ``programs_cap``: a
    persistent launch's program count C (each config launches min(C, its tiles))."""
    n = len(configs)
    cols = {k: np.full(n, float(v)) for k, v in problem.items() if k in PROBLEM_COLUMNS}
    cols.update(config_columns(configs) if columns is None else columns)
    if programs_cap is not None:
        cols["programs_cap"] = np.full(n, float(programs_cap))
    feats = _compute(np.full(n, kernel), np.full(n, float(_DTYPE_BYTES.get(dtype, np.nan))),
                     cols, num_sms=num_sms)
    return _frame(feats, index=None)


def _config_dict(c: Any) -> dict[str, Any]:
    # costtune Config keeps kwargs as pairs, triton.Config as a dict; dict() takes both.
    d = dict(c.kwargs)
    d["num_warps"], d["num_stages"] = c.num_warps, c.num_stages
    return d


def _frame(feats: dict[str, np.ndarray], *, index: Any) -> pd.DataFrame:
    # One float block: far cheaper than a dict of ~50 columns for the hook's per-call budget.
    return pd.DataFrame(np.column_stack([feats[k] for k in STATIC_FEATURES]), index=index,
                        columns=STATIC_FEATURES)


def parse_config_key(key: str) -> Config:
    """Config from its canonical key ``"BLOCK_M=64,...,num_warps=4,num_stages=3"``."""
    values: dict[str, Any] = {}
    for item in key.split(","):
        name, _, text = item.partition("=")
        values[name.strip()] = _parse_value(text.strip())
    return Config.from_dict(values)


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def _floats(s: pd.Series) -> np.ndarray:
    # Nullable Int64/boolean columns (a store holding several families) hold pd.NA.
    return pd.to_numeric(s, errors="coerce").astype("float64").to_numpy()


def _compute(kernel: np.ndarray, dtype_bytes: np.ndarray, cols: dict[str, np.ndarray], *,
             num_sms: int) -> dict[str, np.ndarray]:
    nan = np.full(len(kernel), np.nan)
    col = lambda k: cols.get(k, nan)
    f: dict[str, np.ndarray] = {name: nan for name in STATIC_FEATURES}
    for fam in FAMILIES:
        f[f"kernel_{fam}"] = (kernel == fam).astype(float)
    f["dtype_bytes"] = dtype_bytes
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in PROBLEM_COLUMNS:
            if k != "causal":
                f[f"log2_{k}"] = np.log2(col(k))
        f["causal"] = col("causal")
        for k in CONFIG_COLUMNS[:5]:
            f[f"log2_{k}"] = np.log2(col(k))
        f["num_warps"], f["num_stages"] = col("num_warps"), col("num_stages")
        for k in KNOB_COLUMNS:
            f[f"knob_{k.lower()}"] = col(k)
        # Family-specific quantities, filled per family where its rows are.
        g: dict[str, np.ndarray] = {}
        for fam, fill in (("gemm", _gemm), ("softmax", _softmax), ("attention", _attention)):
            rows = np.flatnonzero(kernel == fam)
            if len(rows):
                sub = {k: col(k)[rows] for k in (*PROBLEM_COLUMNS, *CONFIG_COLUMNS, "PASSES")}
                part = fill(sub, f["dtype_bytes"][rows])
                for name, values in part.items():
                    g.setdefault(name, nan.copy())[rows] = values
        _derived(f, g, num_sms=num_sms)
        _launched(f, col(LAUNCHED), col("programs_cap"), num_sms=num_sms)
    return f


def _launched(f: dict[str, np.ndarray], launched: np.ndarray, cap: np.ndarray, *,
              num_sms: int) -> None:
    """What the launch's real program count implies: a persistent kernel's programs each run
    several tiles, and at most ``programs / SMs`` of them share an SM (one resident program
    per SM leaves a 4-warp program's latency unhidden)."""
    tiles = f["num_programs"]
    programs = np.where(np.isfinite(launched), launched, tiles)
    programs = np.where(np.isfinite(cap), np.minimum(cap, programs), programs)
    f["log2_launched"] = np.log2(programs)
    f["launched_per_tile"] = programs / tiles
    f["ctas_per_sm_launch"] = np.minimum(f["ctas_per_sm_est"], programs / num_sms)
    f["warps_per_sm_launch"] = f["ctas_per_sm_launch"] * f["num_warps"]


def _derived(f: dict[str, np.ndarray], g: dict[str, np.ndarray], *, num_sms: int) -> None:
    """Features defined the same way for every family from the per-family tiled picture."""
    nan = np.full(len(f["dtype_bytes"]), np.nan)
    for k in _FAMILY_KEYS:
        g.setdefault(k, nan)
    for k in ("size_m", "size_n", "size_k", "batch", "tile_m", "tile_n", "tile_k", "flops",
              "min_bytes", "tile_iters", "bytes_loaded"):
        f[f"log2_{k}"] = np.log2(g[k])
    for k in ("num_programs", "pad_waste_m", "pad_waste_n", "pad_waste_k", "smem_bytes_est",
              "tile_intensity", "loop_trips"):
        f[k] = g[k]
    f["log2_problem_intensity"] = f["log2_flops"] - f["log2_min_bytes"]
    f["log2_programs"] = np.log2(f["num_programs"])
    f["waves"] = f["num_programs"] / num_sms
    f["wave_efficiency"] = f["num_programs"] / (np.ceil(f["waves"]) * num_sms)
    f["threads_per_program"] = 32 * f["num_warps"]
    f["elems_per_thread"] = g["tile_elems"] / f["threads_per_program"]
    by_smem = np.where(f["smem_bytes_est"] > 0,
                       np.floor(_SM_SHARED / (f["smem_bytes_est"] + 1024)), 32)
    f["ctas_per_sm_est"] = np.minimum(np.minimum(by_smem, 64 // f["num_warps"]), 32)
    f["resident_waves"] = f["num_programs"] / (num_sms * np.maximum(f["ctas_per_sm_est"], 1))
    f["load_amplification"] = g["bytes_loaded"] / g["input_bytes"]


_FAMILY_KEYS = ("size_m", "size_n", "size_k", "batch", "tile_m", "tile_n", "tile_k", "flops",
                "min_bytes", "input_bytes", "num_programs", "pad_waste_m", "pad_waste_n",
                "pad_waste_k", "smem_bytes_est", "tile_intensity", "loop_trips", "tile_iters",
                "tile_elems", "bytes_loaded")


def _cdiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.ceil(a / b)


def _waste(size: np.ndarray, block: np.ndarray) -> np.ndarray:
    return 1.0 - size / (_cdiv(size, block) * block)


def _gemm(c: dict[str, np.ndarray], e: np.ndarray) -> dict[str, np.ndarray]:
    m, n, k = c["M"], c["N"], c["K"]
    bm, bn, bk, sk = c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["SPLIT_K"]
    tiles_m, tiles_n = _cdiv(m, bm), _cdiv(n, bn)
    # Each split owns a run of whole K tiles (the kernel's split_tiles); the longest run sets
    # the time, so K padding counts the slots of every split at that length.
    trips = _cdiv(_cdiv(k, bk), sk)
    programs = tiles_m * tiles_n * sk
    one = np.ones_like(m)
    return {
        "size_m": m, "size_n": n, "size_k": k, "batch": one,
        "tile_m": bm, "tile_n": bn, "tile_k": bk,
        "flops": 2 * m * n * k, "min_bytes": (m * k + k * n + m * n) * e,
        "input_bytes": (m * k + k * n) * e,
        "num_programs": programs,
        "pad_waste_m": _waste(m, bm), "pad_waste_n": _waste(n, bn),
        "pad_waste_k": 1.0 - k / (trips * sk * bk),
        "smem_bytes_est": c["num_stages"] * (bm + bn) * bk * e,
        "tile_intensity": 2 * bm * bn / ((bm + bn) * e),
        "loop_trips": trips, "tile_iters": programs * trips, "tile_elems": bm * bn,
        # Every output tile reads its A rows and B columns over the whole (padded) K.
        "bytes_loaded": tiles_m * tiles_n * (bm + bn) * trips * sk * bk * e,
    }


def _softmax(c: dict[str, np.ndarray], e: np.ndarray) -> dict[str, np.ndarray]:
    rows, cols = c["rows"], c["cols"]
    rpp, bn, warps, stages = c["ROWS_PER_PROG"], c["BLOCK_N"], c["num_warps"], c["num_stages"]
    programs = _cdiv(rows, rpp)
    chunks = _cdiv(cols, bn)
    looped = chunks > 1
    # One pass when a row fits a block; else an online pass and an output pass read x twice
    # (or as many as the implementation says: implied_params' PASSES, a split row's two).
    passes = np.where(np.isfinite(c["PASSES"]), c["PASSES"], np.where(looped, 2.0, 1.0))
    nan = np.full_like(rows, np.nan)
    # Cross-warp reductions stage one fp32 per warp and row; tl.range pipelining keeps
    # (stages - 1) chunks in flight in shared memory.
    smem = (np.where(warps > 1, warps * 4 * rpp, 0)
            + np.where(looped & (stages > 1), (stages - 1) * rpp * bn * e, 0))
    return {
        "size_m": rows, "size_n": cols, "size_k": nan, "batch": np.ones_like(rows),
        "tile_m": rpp, "tile_n": bn, "tile_k": nan,
        "flops": 5 * rows * cols, "min_bytes": 2 * rows * cols * e, "input_bytes": rows * cols * e,
        "num_programs": programs,
        "pad_waste_m": _waste(rows, rpp), "pad_waste_n": _waste(cols, bn), "pad_waste_k": nan,
        "smem_bytes_est": smem,
        "tile_intensity": 5.0 / (passes * e),
        "loop_trips": chunks, "tile_iters": programs * chunks * passes,
        "tile_elems": rpp * bn,
        "bytes_loaded": programs * rpp * passes * np.minimum(chunks * bn, cols) * e,
    }


def _attention(c: dict[str, np.ndarray], e: np.ndarray) -> dict[str, np.ndarray]:
    b, h, s, d, causal = c["B"], c["H"], c["S"], c["D"], c["causal"]
    bm, bn, stages = c["BLOCK_M"], c["BLOCK_N"], c["num_stages"]
    q_blocks = _cdiv(s, bm)
    trips = np.where(causal > 0, _causal_trips(s, bm, bn), _cdiv(s, bn))
    programs = q_blocks * b * h
    return {
        "size_m": s, "size_n": s, "size_k": d, "batch": b * h,
        "tile_m": bm, "tile_n": bn, "tile_k": d,
        "flops": 4 * b * h * s * s * d / np.where(causal > 0, 2, 1),
        "min_bytes": 4 * b * h * s * d * e, "input_bytes": 3 * b * h * s * d * e,
        "num_programs": programs,
        "pad_waste_m": _waste(s, bm), "pad_waste_n": _waste(s, bn),
        "pad_waste_k": np.zeros_like(s),  # HEAD_DIM is the exact head dim
        # K and V tiles per pipeline stage plus the resident Q tile (the family's estimate).
        "smem_bytes_est": stages * bn * d * 2 * e + bm * d * e,
        # Per KV block: QK^T and PV (4*BM*BN*D FLOPs) over one K and one V tile.
        "tile_intensity": 2 * bm / e,
        "loop_trips": trips, "tile_iters": programs * trips,
        "tile_elems": bm * (bn + d),  # fp32 scores and output accumulator
        "bytes_loaded": programs * (bm * d + 2 * trips * bn * d) * e,
    }


def _causal_trips(s: np.ndarray, bm: np.ndarray, bn: np.ndarray) -> np.ndarray:
    """Mean KV blocks a causal query block visits, as the kernel loops: unmasked blocks up to
    its first row, then masked blocks up to its last row."""
    out = np.full(len(s), np.nan)
    ok = np.isfinite(s) & np.isfinite(bm) & np.isfinite(bn)
    keys = np.stack([s, bm, bn], axis=1)
    for key in np.unique(keys[ok], axis=0):
        sv, m, n = key
        m0 = np.arange(0, sv, m)
        full_end = np.floor((m0 + 1) / n) * n
        hi = np.minimum(m0 + m, sv)
        trips = full_end / n + np.maximum(0, np.ceil((hi - full_end) / n))
        out[(keys == key).all(axis=1)] = trips.mean()
    return out
