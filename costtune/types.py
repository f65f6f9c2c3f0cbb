"""Plain values that flow through the pipeline: Config, Workload, Measurement, Status, and the
warning class of costtune's fallbacks."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

# Launch options that triton.Config keeps outside its kwargs.
LAUNCH_OPTIONS = ("num_warps", "num_stages")


class CosttuneWarning(UserWarning):
    """A costtune fallback: more configs benchmarked than asked (or all), or a stage skipped."""


class Status(str, enum.Enum):
    """Outcome of compiling and running one (workload, config). Only OK rows can win."""

    OK = "ok"
    COMPILE_ERROR = "compile_error"
    OUT_OF_RESOURCES = "out_of_resources"
    PTXAS_ERROR = "ptxas_error"
    LAUNCH_ERROR = "launch_error"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    # Replay only: the recorded dataset holds no row for this (workload, config).
    NOT_MEASURED = "not_measured"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Config:
    """Immutable twin of ``triton.Config``: kernel meta-parameters plus launch options.

    >>> c = Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3)
    >>> c.key
    'BLOCK_M=64,BLOCK_N=64,num_warps=4,num_stages=3'
    """

    kwargs: tuple[tuple[str, Any], ...]
    num_warps: int = 4
    num_stages: int = 3

    def __init__(self, kwargs: dict[str, Any] | tuple = (), *, num_warps: int = 4,
                 num_stages: int = 3) -> None:
        items = tuple(kwargs.items()) if isinstance(kwargs, dict) else tuple(kwargs)
        object.__setattr__(self, "kwargs", items)
        object.__setattr__(self, "num_warps", int(num_warps))
        object.__setattr__(self, "num_stages", int(num_stages))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        """Build from one flat dict that also holds ``num_warps``/``num_stages``."""
        values = dict(values)
        warps = values.pop("num_warps", 4)
        stages = values.pop("num_stages", 3)
        return cls(values, num_warps=warps, num_stages=stages)

    @classmethod
    def from_triton(cls, config: Any) -> Config:
        return cls(dict(config.kwargs), num_warps=config.num_warps, num_stages=config.num_stages)

    def to_triton(self):
        import triton

        return triton.Config(dict(self.kwargs), num_warps=self.num_warps,
                             num_stages=self.num_stages)

    def as_dict(self) -> dict[str, Any]:
        """Flat dict: meta-parameters then launch options."""
        return {**dict(self.kwargs), "num_warps": self.num_warps, "num_stages": self.num_stages}

    def __getitem__(self, name: str) -> Any:
        return self.as_dict()[name]

    @property
    def key(self) -> str:
        """Canonical text id, stable across runs (used as the store's config key)."""
        return ",".join(f"{k}={v}" for k, v in self.as_dict().items())

    def __str__(self) -> str:
        return self.key


@dataclass(frozen=True)
class Workload:
    """One tuning problem: a kernel implementation at fixed problem sizes and dtype.

    ``kernel`` is the family (gemm, softmax, attention), ``implementation`` the kernel of that
    family that runs it (``costtune.kernels.IMPLEMENTATIONS``; by default the family's original,
    named like the family). ``Workload("gemm_tma", ...)`` names an implementation directly.
    ``problem`` holds the family's problem sizes under its own names (M, N, K for GEMM).

    >>> Workload("gemm_tma", {"M": 64, "N": 64, "K": 64}, "float16").kernel
    'gemm'
    """

    kernel: str
    problem: tuple[tuple[str, Any], ...]
    dtype: str
    implementation: str

    def __init__(self, kernel: str, problem: dict[str, Any] | tuple, dtype: str,
                 implementation: str | None = None) -> None:
        from costtune.kernels.base import FAMILIES, family_of

        items = tuple(problem.items()) if isinstance(problem, dict) else tuple(problem)
        if kernel not in FAMILIES and implementation is None:
            try:
                kernel, implementation = family_of(kernel), kernel
            except ValueError:
                pass  # a user kernel's own name (harvest): it is its own implementation
        implementation = kernel if implementation is None else implementation
        object.__setattr__(self, "kernel", kernel)
        object.__setattr__(self, "problem", items)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "implementation", implementation)

    @property
    def sizes(self) -> dict[str, Any]:
        return dict(self.problem)

    @property
    def id(self) -> str:
        """Readable id, e.g. ``gemm_M4096_N4096_K4096_float16`` (``gemm_tma_M4096_...`` for
        another implementation than the family's original)."""
        parts = [f"{k}{int(v)}" for k, v in self.problem]
        return "_".join([self.implementation, *parts, self.dtype])

    def __str__(self) -> str:
        return self.id


@dataclass
class Measurement:
    """Result of one (workload, config): a status, and times only when status is OK."""

    workload: Workload
    config: Config
    status: Status
    time_ms: float = float("nan")
    time_p20_ms: float = float("nan")
    time_p80_ms: float = float("nan")
    rel_err: float = float("nan")
    compile_s: float = float("nan")
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "kernel": self.workload.kernel,
            "workload": self.workload.id,
            "dtype": self.workload.dtype,
            "implementation": self.workload.implementation,
            **self.workload.sizes,
            **self.config.as_dict(),
            "config": self.config.key,
            "status": str(self.status),
            "time_ms": self.time_ms,
            "time_p20_ms": self.time_p20_ms,
            "time_p80_ms": self.time_p80_ms,
            "rel_err": self.rel_err,
            "compile_s": self.compile_s,
            "error": self.error,
        }
        row.update(self.extra)
        return row
