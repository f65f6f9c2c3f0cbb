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

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

FAMILIES = ("gemm", "softmax", "attention")
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
