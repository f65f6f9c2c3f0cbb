"""Config lists of the user-kernel styles (``experiments/user_kernels.py``): tiny ones for the
CPU interpreter, with values the training data has (a value outside it is a doubt that widens
k), and the tutorial-sized ones for the H200; and the tutorials' pre-hooks that set the host
TensorDescriptors' block shapes from a config."""

from __future__ import annotations

import itertools
from typing import Any

import triton


def _attn_block_shapes(nargs: dict[str, Any]) -> None:
    """The tutorial's pre-hook: descriptors start with a dummy block, the config sets it."""
    bm, bn, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
    nargs["desc_q"].block_shape = [bm, d]
    nargs["desc_o"].block_shape = [bm, d]
    nargs["desc_k"].block_shape = [bn, d]
    nargs["desc_v"].block_shape = [bn, d]


def _tma_block_shapes(nargs: dict[str, Any]) -> None:
    bm, bn, bk = nargs["BLOCK_SIZE_M"], nargs["BLOCK_SIZE_N"], nargs["BLOCK_SIZE_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk]
    nargs["c_desc"].block_shape = [bm, bn // 2 if nargs["EPILOGUE_SUBTILE"] else bn]


def _cfg(kwargs: dict[str, Any], warps: int, stages: int, hook: Any = None) -> triton.Config:
    return triton.Config(kwargs, num_warps=warps, num_stages=stages, pre_hook=hook)


def _softmax_configs(size: str) -> list[triton.Config]:
    warps, stages = ((1, 2, 4, 8), (1, 2, 3)) if size == "cpu" else ((1, 2, 4, 8, 16, 32),
                                                                     (1, 2, 3, 4))
    return [_cfg({}, w, s) for w, s in itertools.product(warps, stages)]


def _matmul_configs(size: str) -> list[triton.Config]:
    if size == "cpu":
        # Values the training data has (a config outside them is a doubt that widens k).
        grid = itertools.product((32, 64), (32, 64), (32, 64), (4, 8), (2,))
    else:
        grid = itertools.product((64, 128), (64, 128), (32, 64), (4, 8), (3, 4))
    return [_cfg({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk,
                  "GROUP_SIZE_M": 8}, w, s) for bm, bn, bk, w, s in grid]


def _attn_configs(size: str) -> list[triton.Config]:
    if size == "cpu":
        return [_cfg({"BLOCK_M": bm, "BLOCK_N": bn}, w, s, _attn_block_shapes)
                for bm, bn, s, w in itertools.product((64,), (32, 64), (2, 3), (4, 8))]
    # The tutorial's list, as it keeps it on Hopper (no 8-warp configs under 128 x 128).
    return [_cfg({"BLOCK_M": bm, "BLOCK_N": bn}, w, s, _attn_block_shapes)
            for bm, bn, s, w in itertools.product((64, 128), (32, 64, 128), (2, 3, 4), (4, 8))
            if not (bm * bn < 128 * 128 and w == 8)]


def _tma_configs(size: str) -> list[triton.Config]:
    if size == "cpu":
        grid = itertools.product((32, 64), (32, 64), (32,), (2,), (4, 8), (True, False))
    else:
        grid = itertools.product((128,), (128, 256), (64, 128), (3, 4), (4, 8), (True, False))
    return [_cfg({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk,
                  "GROUP_SIZE_M": 8, "EPILOGUE_SUBTILE": sub}, w, s, _tma_block_shapes)
            for bm, bn, bk, s, w, sub in grid]


def _inductor_configs(size: str) -> list[triton.Config]:
    if size == "cpu":
        grid = itertools.product((1, 2, 4), (64, 128), (2, 4))
    else:
        grid = [(x, r, w) for x, r, w in itertools.product((1, 2, 4, 8), (256, 512, 1024, 2048,
                                                                           4096), (4, 8))
                if 512 <= x * r <= 8192]
    return [_cfg({"XBLOCK": x, "R0_BLOCK": r}, w, 1) for x, r, w in grid]
