"""Config checks the implementations of a family share (one ValueError line naming the
implementation and the parameter)."""

from __future__ import annotations

import operator
from typing import Any

from costtune.types import Config


def check_gemm_config(config: Config | dict[str, Any], *, params: tuple[str, ...],
                 launch: tuple[str, ...] = ("num_warps", "num_stages"), name: str,
                 bools: bool = True) -> dict[str, Any]:
    """A GEMM implementation's config as a flat dict with ``params`` as ints; ValueError
    naming ``name`` (the implementation) for unknown or missing names, non-integers (and,
    without ``bools``, booleans) and BLOCK_M/N/K that are not powers of two >= 16. The GEMM
    implementations share it and add their own checks."""
    values = Config.from_dict(config).as_dict() if isinstance(config, dict) else config.as_dict()
    unknown = sorted(set(values) - set(params) - set(launch))
    if unknown:
        raise ValueError(f"unknown config parameter(s) {unknown}; "
                         f"{name} takes {list(params + launch)}")
    missing = [key for key in params if key not in values]
    if missing:
        raise ValueError(f"config is missing {missing}")
    for key in params:
        try:  # integral numpy values (a store row) are fine; floats and strings are not
            if not bools and isinstance(values[key], bool):
                raise TypeError
            values[key] = operator.index(values[key])
        except TypeError:
            raise ValueError(f"config {key}={values[key]!r} must be an int") from None
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        v = values[key]
        # tl.arange needs powers of two and tl.dot needs at least 16 along every dimension.
        if v < 16 or v & (v - 1):
            raise ValueError(f"config {key}={v!r} must be a power of two >= 16")
    return values
