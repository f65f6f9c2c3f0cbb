"""The family contract and the family facts, defined once (no torch or triton import here).

Every family module defines the same plain names, so the runner, features and model stay generic:

- ``NAME`` ("gemm"), ``PROBLEM_KEYS`` (("M", "N", "K")), ``DTYPES`` (torch dtype names)
- ``TRAIN_SHAPES`` / ``TEST_SHAPES``: disjoint lists of problem dicts (``{"M": .., ...}``)
- ``make_inputs(problem, dtype, *, seed=0, device="cpu") -> dict[str, Tensor]``
- ``reference(inputs) -> Tensor``: fp32 result computed by torch in fp32
- ``torch_op(inputs) -> Tensor``: the fast torch equivalent timed beside our configs
- ``grid(problem, config) -> tuple[int, ...]``: the main kernel's launch grid (no tensors needed)
- ``kernel_calls(inputs, config) -> list[KernelCall]``: the Triton launches ``launch`` makes
- ``launch(inputs, config) -> Tensor``: runs the kernel (bad inputs: ValueError naming the arg)
- ``flops(problem)``, ``min_bytes(problem, dtype)``
- ``config_space(problem=None) -> ConfigSpace``: the default space; shape constraints when given
- ``TOLERANCE``: dtype name -> max relative error ||out - ref|| / ||ref||
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

FAMILIES = ("gemm", "softmax", "attention")
# The implementations of each family in the suite, each a module ``costtune.kernels.<name>``
# that fulfils the contract above for its family's problems (shapes, inputs, reference and
# FLOP/byte counts are the family's; kernel, grid, launches and config space are its own). The
# first is the family's original kernel, whose module is the family module itself.
IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm", "gemm_tutorial", "gemm_tma", "gemm_tma_device", "gemm_streamk",
             "gemm_splitk"),
    "softmax": ("softmax", "softmax_onepass", "softmax_multirow", "softmax_splitrow",
                "softmax_tma"),
    "attention": ("attention", "attention_tma", "attention_persistent",
                  "attention_tma_persistent"),
}
# Each family's problem keys (its module's PROBLEM_KEYS reads them from here).
PROBLEM_KEYS: dict[str, tuple[str, ...]] = {
    "gemm": ("M", "N", "K"), "softmax": ("rows", "cols"),
    "attention": ("B", "H", "S", "D", "causal"),
}
# Flags among the problem keys: not sizes (no log2 feature, no trained size range).
FLAG_KEYS = frozenset({"causal"})
# The keys that are sizes, per family.
SIZE_KEYS: dict[str, tuple[str, ...]] = {
    f: tuple(k for k in keys if k not in FLAG_KEYS) for f, keys in PROBLEM_KEYS.items()}
# Every family's problem keys, in family order (the dataset's problem columns).
PROBLEM_COLUMNS: tuple[str, ...] = tuple(k for f in FAMILIES for k in PROBLEM_KEYS[f])

# How kernels people write name each family's config parameters: Triton's tutorials
# (BLOCK_SIZE_M, BLOCK_SIZE), Inductor's generated kernels (XBLOCK over rows, R0_BLOCK / RBLOCK
# over the reduction) and common kernel libraries (BM / BN / BK, TILE_N, BLOCK_Q / BLOCK_KV).
# Per family parameter, in order of preference; costtune's own name comes first.
PARAM_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "gemm": {
        "BLOCK_M": ("BLOCK_M", "BLOCK_SIZE_M", "BM", "TILE_M", "BLOCK_M_SIZE"),
        "BLOCK_N": ("BLOCK_N", "BLOCK_SIZE_N", "BN", "TILE_N", "BLOCK_N_SIZE"),
        "BLOCK_K": ("BLOCK_K", "BLOCK_SIZE_K", "BK", "TILE_K", "BLOCK_K_SIZE"),
        "SPLIT_K": ("SPLIT_K", "SPLITK", "SPLIT_K_FACTOR", "K_SPLITS", "NUM_SPLITS",
                    "NUM_SPLIT_K", "NUM_K_SPLITS", "N_SPLITS"),
    },
    "softmax": {
        "BLOCK_N": ("BLOCK_N", "BLOCK_SIZE", "BLOCK_SIZE_N", "R0_BLOCK", "RBLOCK", "BLOCK",
                    "TILE_N", "BLOCK_COLS", "TILE_SIZE"),
        "ROWS_PER_PROG": ("ROWS_PER_PROG", "XBLOCK", "ROWS_PER_PROGRAM", "BLOCK_M",
                          "BLOCK_SIZE_M", "BLOCK_ROWS", "TILE_M", "ROW_BLOCK"),
    },
    "attention": {
        "BLOCK_M": ("BLOCK_M", "BLOCK_SIZE_M", "BLOCK_Q", "BM", "BLOCK_M_Q"),
        "BLOCK_N": ("BLOCK_N", "BLOCK_SIZE_N", "BLOCK_KV", "BN", "BLOCK_N_KV"),
    },
}
# The same for problem sizes, as kernel arguments: tutorial 02's n_rows / n_cols, Inductor's
# xnumel / r0_numel (rnumel before torch 2.6), tutorial 06's Z / H / N_CTX / HEAD_DIM,
# flash-attn's batch / nheads / seqlen / headdim, FlagGems' softmax M / N.
SIZE_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "gemm": {"M": ("M", "m", "size_m"), "N": ("N", "n", "size_n"), "K": ("K", "k", "size_k")},
    "softmax": {
        "rows": ("rows", "n_rows", "num_rows", "xnumel", "n_row", "M"),
        "cols": ("cols", "n_cols", "num_cols", "r0_numel", "rnumel", "n_col", "N"),
    },
    "attention": {
        "B": ("B", "Z", "BATCH", "batch", "batch_size", "b"),
        "H": ("H", "N_HEAD", "N_HEADS", "nheads", "num_heads", "n_heads", "h", "HQ",
              "num_query_heads", "q_head_num"),
        "S": ("S", "N_CTX", "seq_len", "seqlen", "SEQ_LEN", "seqlen_q", "N_CTX_Q", "Q_CTX"),
        "D": ("D", "HEAD_DIM", "head_dim", "headdim", "BLOCK_DMODEL", "BLOCK_HEADDIM",
              "D_HEAD", "HEAD_SIZE", "head_size", "d"),
        "causal": ("causal", "CAUSAL", "IS_CAUSAL", "is_causal"),
    },
}
# The keys' sequence length where a kernel takes it apart from the queries' (cross-attention).
KV_LENGTH_NAMES: tuple[str, ...] = ("seqlen_k", "N_CTX_K", "N_CTX_KV", "KV_CTX", "seqlen_kv",
                                    "kv_len", "SEQLEN_K", "S_K", "kv_seq_len", "seq_len_kv",
                                    "KV_LEN", "N_KV", "cache_seqlen", "kv_seqlen")
# The keys, by the names attention kernels give them (their sequence dim against the queries').
KEY_NAMES: tuple[str, ...] = ("k", "K", "k_ptr", "K_ptr", "key", "k_cache", "K_cache",
                              "desc_k", "k_desc")
# Flags passed as a code: tutorial 06's STAGE is 3 for causal attention and 1 otherwise.
CODED_FLAGS: dict[str, dict[str, tuple[str, dict[int, int]]]] = {
    "attention": {"causal": ("STAGE", {1: 0, 3: 1})},
}
# The input operand whose dtype is the launch's (outputs or fp32 statistics may differ).
class Names(tuple):
    """Argument names matched without regard to case (``A_ptr`` is ``a_ptr``).

    >>> "A_ptr" in Names(("a_ptr",)), "b" in Names(("a",))
    (True, False)
    """

    def __new__(cls, names: tuple[str, ...]) -> Names:
        self = super().__new__(cls, names)
        self.folded = frozenset(n.casefold() for n in names)
        return self

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.casefold() in self.folded


INPUT_NAMES: dict[str, Names] = {
    "gemm": Names(("a", "a_ptr", "a_desc", "desc_a", "arg_A", "x", "x_ptr")),
    "softmax": Names(("x", "x_ptr", "input_ptr", "inp_ptr", "in_ptr0", "inp", "input")),
    "attention": Names(("q", "q_ptr", "query", "query_ptr", "desc_q", "q_desc")),
}
# A GEMM's second operand (K x N, or N x K for x @ w.t()), by the names kernels give it.
GEMM_B_NAMES: Names = Names(("b", "b_ptr", "b_desc", "desc_b", "arg_B", "y", "y_ptr", "w",
                             "w_ptr", "weight", "weight_ptr"))
# Triton launch options besides num_warps / num_stages, with their neutral values
# (``ir_override``: a .ttgir/.ptx file compiled in place of the kernel's own IR).
LAUNCH_OPTION_DEFAULTS: dict[str, Any] = {"num_ctas": 1, "maxnreg": None, "ir_override": None}
# Config knobs that kernels tune and no family model has learned (its data holds none):
# recognised, passed to Triton unchanged and never a reason to give up on a kernel.
KNOWN_KNOBS: tuple[str, ...] = (
    "GROUP_SIZE_M", "GROUP_M", "GROUP_SIZE", "EPILOGUE_SUBTILE", "WARP_SPECIALIZE",
    "warp_specialize", "FLATTEN", "TMA", "USE_TMA", "NUM_SMS", "NUM_CTAS", "num_ctas",
    "maxnreg", "ir_override", "NUM_STAGES", "EVEN_K", "ONE_TILE_PER_CTA", "NUM_BUFFERS",
    "NUM_CONSUMER_GROUPS")

# What a kernel's name says it computes (``re.search`` on the lower-cased name).
NAME_PATTERNS: dict[str, str] = {
    "gemm": r"matmul|gemm|(?<![a-z])(b|add)?mm(?![a-z])|linear",
    "softmax": r"softmax",
    "attention": r"attn|attention|flash|fmha|sdpa|(?<![a-z])mha(?![a-z])",
}
# Kernels of kinds no family stands for, by name; checked before NAME_PATTERNS, so a fused
# "matmul_rmsnorm" or a "softmax_backward" counts as unseen.
OTHER_KIND_PATTERNS: dict[str, str] = {
    "a backward pass": r"(?<![a-z])(bwd|backward|grad)(?![a-z])",
    # Several GEMMs of their own sizes in one launch (tutorial 08, MoE expert kernels): no one
    # M x N x K describes it.
    "a grouped GEMM": r"group(ed)?_?(gemm|matmul|mm)|(?<![a-z])(fused_?)?moe|"
                      r"(?<![a-z])experts?(?![a-z])",
    # Losses over a softmax (cross-entropy, NLL, KL, JSD): other outputs.
    "a loss": r"(?<![a-z])(ce|nll|jsd|celoss|xentropy|xent)(?![a-z])|kl_?div|_loss(?![a-z])",
    "a row logsumexp": r"logsumexp|(?<![a-z])lse(?![a-z])",
    "a layer norm": r"layer_?norm|(?<![a-z])ln(?![a-z])",
    "an RMS norm": r"rms_?norm",
    "a batch / group norm": r"(batch|group|instance)_?norm",
    "a convolution": r"conv(?!er)",
    "a cross-entropy": r"cross_?entropy",
    "a rotary embedding": r"rotary|(?<![a-z])rope(?![a-z])",
}
# Kinds no family stands for, by what a kernel's source names (checked before its operations):
# a kernel indexing experts is a grouped GEMM (ScatterMoE's _scatter2scatter).
OTHER_KIND_SOURCE: dict[str, str] = {"a grouped GEMM": r"\b\w*experts?_\w+|\b\w+_experts?\b"}
# Operations that say what a kernel's source computes, when its name does not.
SOURCE_OPS: dict[str, str] = {
    "dot": r"\bdot(_scaled)?\s*\(",
    "exp": r"\bexp2?\s*\(",
    "max": r"\b(max2?|amax)\s*\(",  # reductions; tl.maximum is elementwise (a ReLU)
    "sum": r"\bsum2?\s*\(",
    "rsqrt": r"\b(rsqrt|sqrt)\s*\(",
    # Reductions and scans of other kinds: tl.reduce, arg-reductions, cumulative sums, sorts.
    "reduce": r"\b(reduce|argmax|argmin|xor_sum|min|max_with_index|min_with_index|"
              r"welford\w*)\s*\(",
    "scan": r"\b(associative_scan|cumsum|cumprod|sort|flip)\s*\(",
}
# Arguments that name the upstream gradient every backward pass reads (dO, DY, dout, d_out_ptr,
# grad_output): a backward pass. Not dQ / dK alone (forward kernels name head dims d_k), not
# D_OUT (a size), not a REQUIRES_GRAD flag; constexpr parameters never count.
GRADIENT_ARGS = (r"^(arg_)?(d(o|y|out|output)(_?ptrs?)?|d_(o|y|out|output)_?ptrs?|"
                 r"grad_?(o|y|out|output)?(_?ptrs?)?)$")
# A sliding-window (local) attention's window, by the names kernels give it.
WINDOW_NAMES: tuple[str, ...] = ("WINDOW_SIZE", "window_size", "window_size_left",
                                 "window_size_right", "SLIDING_WINDOW", "sliding_window",
                                 "WINDOW", "window", "local_window")


@dataclass
class KernelCall:
    """One Triton launch: ``fn[grid](*args, **kwargs, num_warps=.., num_stages=..)``."""

    fn: Any
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 3

    def run(self) -> None:
        self.fn[self.grid](*self.args, **self.kwargs, num_warps=self.num_warps,
                           num_stages=self.num_stages)

    def warmup(self) -> Any:
        """Compile (or load from Triton's disk cache) without launching."""
        return self.fn.warmup(*self.args, grid=self.grid, **self.kwargs,
                              num_warps=self.num_warps, num_stages=self.num_stages)

    @property
    def num_programs(self) -> int:
        n = 1
        for g in self.grid:
            n *= int(g)
        return n


def get_family(name: str) -> ModuleType:
    """The family module by name, e.g. ``get_family("gemm").launch(inputs, config)``."""
    if name not in FAMILIES:
        raise ValueError(f"unknown kernel family {name!r}; known: {', '.join(FAMILIES)}")
    return importlib.import_module(f"costtune.kernels.{name}")


def family_of(implementation: str) -> str:
    """The family an implementation belongs to: ``family_of("gemm_tma") == "gemm"``."""
    for family, names in IMPLEMENTATIONS.items():
        if implementation in names:
            return family
    known = ", ".join(n for names in IMPLEMENTATIONS.values() for n in names)
    raise ValueError(f"unknown kernel implementation {implementation!r}; known: {known}")


def get_implementation(name: str) -> ModuleType:
    """The implementation module by name (a family name gives its original kernel), e.g.
    ``get_implementation("gemm_tma").launch(inputs, config)``."""
    family_of(name)
    return importlib.import_module(f"costtune.kernels.{name}")


_POISON_SCRATCH = contextvars.ContextVar("costtune_poison_scratch", default=False)


@contextlib.contextmanager
def poisoned_scratch() -> Iterator[None]:
    """Inside, ``scratch`` buffers start as NaN: the runner's correctness check launches in
    it, so a launch that leaves its workspace unwritten fails the check instead of reading a
    previous config's values from recycled memory (the timed launches stay uninitialised)."""
    token = _POISON_SCRATCH.set(True)
    try:
        yield
    finally:
        _POISON_SCRATCH.reset(token)


def scratch(shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
    """A workspace one launch of a kernel writes and a later one reads: uninitialised, or NaN
    inside ``poisoned_scratch()``."""
    import torch

    if _POISON_SCRATCH.get():
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def relative_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in fp32; inf when out has NaN/inf or the shapes differ."""
    import torch

    if out.shape != ref.shape:
        return float("inf")
    out32 = out.detach().float()
    ref32 = ref.detach().float().to(out32.device)
    if not bool(torch.isfinite(out32).all()):
        return float("inf")
    denom = float(torch.linalg.vector_norm(ref32))
    num = float(torch.linalg.vector_norm(out32 - ref32))
    return num / denom if denom > 0 else num


def dtype_of(name: str):
    import torch

    try:
        dt = getattr(torch, name)
    except AttributeError:
        dt = None
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}; use a torch dtype name such as 'float16'")
    return dt


def check_tensor(name: str, t: Any, *, dtypes: tuple[str, ...], ndim: int,
                 device: Any = None) -> None:
    """Raise ValueError naming ``name`` when ``t`` is not a tensor of an allowed dtype and rank,
    or sits on another device than ``device``."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if str(t.dtype).removeprefix("torch.") not in dtypes:
        raise ValueError(f"{name} has dtype {t.dtype}; expected one of {list(dtypes)}")
    if t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but the other inputs are on {device}")
