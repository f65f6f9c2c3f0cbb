"""The kernel suite: one module per family (gemm, softmax, attention), each with its Triton
kernel, torch reference, FLOP/byte counts, config space and disjoint train/test shapes.

``base`` holds the family contract and the family facts (problem keys) once; it imports
neither torch nor triton, so callers that only need the facts stay light.
"""

from __future__ import annotations

from costtune.kernels.base import (
    FAMILIES,
    FLAG_KEYS,
    IMPLEMENTATIONS,
    PROBLEM_COLUMNS,
    PROBLEM_KEYS,
    SIZE_KEYS,
    KernelCall,
    check_tensor,
    dtype_of,
    family_of,
    get_family,
    get_implementation,
    relative_error,
)

__all__ = ["FAMILIES", "FLAG_KEYS", "IMPLEMENTATIONS", "PROBLEM_COLUMNS", "PROBLEM_KEYS",
           "SIZE_KEYS", "KernelCall", "check_tensor", "dtype_of", "family_of", "get_family",
           "get_implementation", "relative_error"]
