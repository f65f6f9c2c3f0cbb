"""Row softmax over the last dim of a 2-D tensor, computed in fp32, stored in the input dtype.

Two Triton kernels; the config picks one. When a row fits in one block (``BLOCK_N >= cols``) a
single pass loads ``ROWS_PER_PROG`` rows, reduces and stores. Otherwise an online pass keeps a
running max and sum per lane over ``BLOCK_N`` chunks, then a second loop writes the output.

``inputs`` is ``{"x": (rows, cols) tensor}``, optionally with ``"out"`` (same shape and dtype, any
strides) to write into; otherwise ``kernel_calls`` allocates it.

>>> import torch
>>> from costtune.kernels import softmax
>>> x = softmax.make_inputs({"rows": 3, "cols": 100}, "float32")
>>> cfg = {"BLOCK_N": 128, "ROWS_PER_PROG": 1, "num_warps": 4, "num_stages": 1}
>>> torch.allclose(softmax.launch(x, cfg), softmax.reference(x), atol=1e-6)  # doctest: +SKIP
True
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

import torch
import triton
import triton.language as tl

from costtune.kernels.base import PROBLEM_KEYS as FAMILY_PROBLEM_KEYS
from costtune.kernels.base import KernelCall, check_tensor, dtype_of
from costtune.space.config_space import ConfigSpace
from costtune.types import Config

NAME = "softmax"
FAMILY = NAME  # the family's original implementation
DESCRIPTION = ("Row softmax, one program per ROWS_PER_PROG rows: a single pass when the row fits "
               "one BLOCK_N block, else an online max/sum pass over chunks and a store pass.")
PROBLEM_KEYS = FAMILY_PROBLEM_KEYS[NAME]
DTYPES = ("float16", "bfloat16", "float32")

# Norm-wise relative error against fp32 torch. fp32: only exp2 vs exp and summation order
# differ (~1e-7 per element), 1e-5 leaves room for the GPU's approximate ex2. fp16/bf16: the
# output rounding alone is up to 2^-11 / 2^-8 relative per element (~3e-4 / ~2e-3 norm-wise).
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}

# Suites: rows x cols with rows*cols <= 2^27 elements. They stand for attention-score rows
# (rows = batch*heads*seq, cols = seq), LM-head vocab rows (32000, 50257, 65536; 128256-sized
# vocabularies are capped at 65536), classifier heads (80..21843 classes, small batches) and
# batch x seq rows over hidden-sized cols. The big squares 4096^2 and 8192^2 (issue target:
# >= 3.6 TB/s on the H200) are held out in TEST_SHAPES.
_TRAIN = [
    # attention-score rows
    (65536, 128), (32768, 256), (16384, 512), (65536, 1024), (32768, 2048), (8192, 4096),
    (16384, 8192), (2048, 16384), (1024, 32768), (24576, 384),
    # LM-head vocab rows
    (1, 32000), (8, 32000), (128, 32000), (2048, 32000), (1, 50257), (32, 50257),
    (512, 50257), (2560, 50257), (4, 65536), (256, 65536), (2048, 65536), (16, 49152),
    (1024, 32064),
    # classifier heads
    (1, 1000), (64, 1000), (256, 1000), (4096, 1000), (128, 21843), (32, 80), (512, 100),
    (1, 3000), (2048, 3000),
    # batch x seq rows over hidden-sized cols
    (4096, 768), (65536, 64), (16384, 1024), (8192, 2000), (32768, 1536), (1, 4096),
    (3, 5000), (100, 12288),
]
_TEST = [
    (4096, 4096), (8192, 8192),
    (65536, 256), (16384, 2048), (4096, 16384), (512, 512),
    (4, 32000), (1024, 50257), (64, 65536), (16, 51200), (4096, 32768),
    (8, 1000), (1024, 1000), (1, 21843), (256, 91),
    (8192, 768), (32768, 3072), (2, 7000), (777, 1234), (65536, 96),
]
TRAIN_SHAPES = [{"rows": r, "cols": c} for r, c in _TRAIN]
TEST_SHAPES = [{"rows": r, "cols": c} for r, c in _TEST]

LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)

_PARAMS = ("BLOCK_N", "ROWS_PER_PROG", "num_warps", "num_stages")


@triton.jit
def _softmax_one_pass(x_ptr, out_ptr, rows, cols, stride_xr, stride_xc, stride_or, stride_oc,
                      BLOCK_N: tl.constexpr, ROWS_PER_PROG: tl.constexpr):
    row = tl.program_id(0) * ROWS_PER_PROG + tl.arange(0, ROWS_PER_PROG)
    # Rows past the end re-read the last row instead of loading all -inf (which gives NaN);
    # only their stores are masked.
    row_ld = tl.minimum(row, rows - 1).to(tl.int64)
    col = tl.arange(0, BLOCK_N)
    col_ok = col < cols
    x = tl.load(x_ptr + row_ld[:, None] * stride_xr + col[None, :] * stride_xc,
                mask=col_ok[None, :], other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    p = tl.exp2((x - m[:, None]) * LOG2E)
    y = p * (1.0 / tl.sum(p, axis=1))[:, None]
    out = out_ptr + row[:, None].to(tl.int64) * stride_or + col[None, :] * stride_oc
    tl.store(out, y.to(out_ptr.dtype.element_ty), mask=(row < rows)[:, None] & col_ok[None, :])


@triton.jit
def _softmax_online(x_ptr, out_ptr, rows, cols, stride_xr, stride_xc, stride_or, stride_oc,
                    BLOCK_N: tl.constexpr, ROWS_PER_PROG: tl.constexpr,
                    NUM_STAGES: tl.constexpr):
    row = tl.program_id(0) * ROWS_PER_PROG + tl.arange(0, ROWS_PER_PROG)
    row_ld = tl.minimum(row, rows - 1).to(tl.int64)
    x_row = x_ptr + row_ld[:, None] * stride_xr
    col = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(cols, BLOCK_N)
    # Running max and sum per lane, not per row: no cross-warp reduction (and barrier) per chunk.
    m = tl.full([ROWS_PER_PROG, BLOCK_N], -float("inf"), tl.float32)
    s = tl.zeros([ROWS_PER_PROG, BLOCK_N], tl.float32)
    for i in tl.range(0, n_chunks, num_stages=NUM_STAGES):
        c = i * BLOCK_N + col
        x = tl.load(x_row + c[None, :] * stride_xc, mask=(c < cols)[None, :],
                    other=-float("inf")).to(tl.float32)
        # One exp2 per element instead of two: exp(-|x - m|) rescales whichever side is
        # smaller, which keeps this pass memory-bound on the H200's ex2 throughput.
        hi = tl.maximum(m, x)
        lo = tl.minimum(m, x)
        # hi = -inf only when both are -inf (input holds -inf); avoid -inf - -inf = NaN.
        e = tl.exp2((lo - tl.where(hi == -float("inf"), 0.0, hi)) * LOG2E)
        s = tl.where(x > m, s * e + 1.0, s + e)
        m = hi
    m_row = tl.max(m, axis=1)
    s_row = tl.sum(s * tl.exp2((m - m_row[:, None]) * LOG2E), axis=1)
    inv = 1.0 / s_row
    out_row = out_ptr + row[:, None].to(tl.int64) * stride_or
    row_ok = (row < rows)[:, None]
    for i in tl.range(0, n_chunks, num_stages=NUM_STAGES):
        # Last chunk first: the tail of the row was read most recently, so it is likeliest in L2.
        c = (n_chunks - 1 - i) * BLOCK_N + col
        c_ok = (c < cols)[None, :]
        x = tl.load(x_row + c[None, :] * stride_xc, mask=c_ok, other=-float("inf"))
        y = tl.exp2((x.to(tl.float32) - m_row[:, None]) * LOG2E) * inv[:, None]
        tl.store(out_row + c[None, :] * stride_oc, y.to(out_ptr.dtype.element_ty),
                 mask=row_ok & c_ok)


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _sizes(problem: dict[str, Any], *, name: str = NAME) -> tuple[int, int]:
    """(rows, cols) of a softmax problem; ValueError naming ``name`` (the implementation)."""
    missing = [k for k in PROBLEM_KEYS if k not in problem]
    if missing:
        raise ValueError(f"problem lacks {missing}; {name} needs {list(PROBLEM_KEYS)}")
    rows, cols = int(problem["rows"]), int(problem["cols"])
    if rows < 1 or cols < 1:
        raise ValueError(f"rows and cols must be >= 1, got {rows}x{cols}")
    return rows, cols


def _config_values(config: Config | dict[str, Any], *, params: tuple[str, ...] = _PARAMS,
                   name: str = NAME, powers_of_two: bool = True) -> dict[str, int]:
    """The config's ``params`` as ints: unknown or missing names, values < 1 and (with
    ``powers_of_two``) block sizes and warp counts that are not powers of two raise a
    ValueError naming ``name``. The softmax implementations share it."""
    values = config.as_dict() if isinstance(config, Config) else dict(config)
    unknown = sorted(set(values) - set(params))
    missing = sorted(set(params) - set(values))
    if unknown or missing:
        raise ValueError(f"{name} config: unknown {unknown}, missing {missing}; "
                         f"expected {list(params)}")
    for key, v in values.items():
        if not isinstance(v, Integral) or v < 1:
            raise ValueError(f"{name} config: {key}={v!r} must be a positive integer")
        if powers_of_two and key != "num_stages" and v & (v - 1):
            raise ValueError(f"{name} config: {key}={v!r} must be a power of two")
    return {k: int(v) for k, v in values.items()}


def make_inputs(problem: dict[str, Any], dtype: str, *, seed: int = 0,
                device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """``{"x": randn(rows, cols)}`` from a seeded CPU generator, so CPU and GPU inputs match."""
    rows, cols = _sizes(problem)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    # Scale 2 makes rows peakier than unit logits, closer to trained attention / LM heads.
    x = 2.0 * torch.randn(rows, cols, generator=gen, dtype=torch.float32)
    return {"x": x.to(dtype_of(dtype)).to(device)}


def reference(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.softmax(inputs["x"].float(), -1)


def torch_op(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.softmax(inputs["x"], -1)


def grid(problem: dict[str, Any], config: Config | dict[str, Any]) -> tuple[int, ...]:
    rows, _ = _sizes(problem)
    return (triton.cdiv(rows, _config_values(config)["ROWS_PER_PROG"]),)


def implied_params(problem: dict[str, Any], config: Config | dict[str, Any]) -> dict[str, int]:
    """BLOCK_N and ROWS_PER_PROG are both tuned here: nothing is fixed."""
    return {}


def check_inputs(inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, out) of a softmax launch: ``x`` a non-empty 2-D tensor of a family dtype, ``out``
    the given one (same shape and dtype) or a new contiguous one. The implementations share it.
    """
    x = inputs.get("x")
    check_tensor("x", x, dtypes=DTYPES, ndim=2)
    out = inputs.get("out")
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    check_tensor("out", out, dtypes=(str(x.dtype).removeprefix("torch."),), ndim=2,
                 device=x.device)
    if out.shape != x.shape:
        raise ValueError(f"out has shape {tuple(out.shape)} but x has {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"x must be non-empty, got shape {tuple(x.shape)}")
    return x, out


def kernel_calls(inputs: dict[str, torch.Tensor],
                 config: Config | dict[str, Any]) -> list[KernelCall]:
    """The one launch ``launch`` makes; allocates ``out`` unless ``inputs`` holds one."""
    cfg = _config_values(config)
    x, out = check_inputs(inputs)
    rows, cols = x.shape
    args = (x, out, rows, cols, x.stride(0), x.stride(1), out.stride(0), out.stride(1))
    kwargs: dict[str, Any] = {"BLOCK_N": cfg["BLOCK_N"], "ROWS_PER_PROG": cfg["ROWS_PER_PROG"]}
    if cfg["BLOCK_N"] >= cols:
        fn = _softmax_one_pass
    else:
        fn = _softmax_online
        # tl.range pipelining is what overlaps the chunk loads; the launch option alone only
        # pipelines loads that feed tl.dot.
        kwargs["NUM_STAGES"] = cfg["num_stages"]
    return [KernelCall(fn, grid({"rows": rows, "cols": cols}, cfg), args, kwargs,
                       num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])]


def launch(inputs: dict[str, torch.Tensor], config: Config | dict[str, Any]) -> torch.Tensor:
    """Run the kernel and return the softmax (a new tensor unless ``inputs["out"]`` is given)."""
    calls = kernel_calls(inputs, config)
    for call in calls:
        call.run()
    return calls[-1].args[1]


def flops(problem: dict[str, Any]) -> float:
    # ~5 per element: max, subtract, exp, sum, scale (the looped path's extra work not counted).
    rows, cols = _sizes(problem)
    return 5.0 * rows * cols


def min_bytes(problem: dict[str, Any], dtype: str) -> float:
    """Read x once and write the output once."""
    rows, cols = _sizes(problem)
    return 2.0 * rows * cols * dtype_of(dtype).itemsize


def config_space(problem: dict[str, Any] | None = None) -> ConfigSpace:
    """BLOCK_N x ROWS_PER_PROG x num_warps x num_stages; with a problem, shape constraints too."""
    params = {
        "BLOCK_N": [2**k for k in range(6, 17)],
        "ROWS_PER_PROG": [1, 2, 4, 8],
        "num_warps": [1, 2, 4, 8, 16, 32],
        "num_stages": [1, 2, 3],
    }

    def elements_per_thread(c: dict[str, Any]) -> bool:
        # Under 1 leaves threads idle; over 64 fp32 values per thread spills registers.
        return 1 <= c["BLOCK_N"] * c["ROWS_PER_PROG"] / (32 * c["num_warps"]) <= 64

    constraints = {"elements_per_thread_1_to_64": elements_per_thread}
    if problem is not None:
        rows, cols = _sizes(problem)
        block_max = max(64, _next_pow2(cols))
        constraints.update({
            "block_n_le_next_pow2_cols": lambda c: c["BLOCK_N"] <= block_max,
            "rows_per_prog_le_rows": lambda c: c["ROWS_PER_PROG"] <= rows,
            # Stages only pipeline the chunk loop; a one-pass config would repeat per stage.
            "stages_only_when_looping": lambda c: c["num_stages"] == 1 or c["BLOCK_N"] < cols,
            # A looped row already fills a program; extra rows there act as a wider chunk and
            # would triple the space (4096x4096: 356 -> 92 configs).
            "rows_per_prog_only_one_pass": lambda c: (c["ROWS_PER_PROG"] == 1
                                                      or c["BLOCK_N"] >= cols),
        })
    return ConfigSpace(params, constraints=constraints)


def shared_memory_floor(problem: dict[str, Any], config: dict[str, Any], *, dtype: str,
                        aligned: dict[str, bool], arch: int = 90,
                        warp_specialized: Any = False) -> int | Any:
    """Bytes of shared memory a softmax config needs at least (the feasibility check's lower
    bound): none can be claimed. Rows live in registers; what shared memory holds (reduction
    scratch, pipelined chunks) ranges down to 1/16 of the chunk on the dataset's compiled rows,
    so the check never drops a softmax config for shared memory (threads still count).
    Vectorised like the other families: an array of zeros for array values.

    >>> shared_memory_floor({"rows": 8, "cols": 4096}, {"BLOCK_N": 1024, "ROWS_PER_PROG": 1,
    ...     "num_warps": 4, "num_stages": 3}, dtype="float16", aligned={"x": True})
    0
    """
    import numpy as np

    shape = np.shape(config["num_stages"])
    return 0 if shape == () else np.zeros(shape, dtype=np.int64)
