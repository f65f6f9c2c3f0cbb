"""Counts from a compiled kernel's PTX, SASS and cubin resource table (no GPU needed).

Counts are static: instructions in the code, not executed ones (a loop body counts once). They
still separate configs well: tensor-core shapes, load widths, pipelining (cp.async, TMA,
barriers) and spills all show up in the code.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections import Counter

PTX_FEATURES = (
    "ptx_instructions", "ptx_wgmma", "ptx_mma", "ptx_ld_global", "ptx_ld_global_v2",
    "ptx_ld_global_v4", "ptx_ld_global_bytes", "ptx_st_global", "ptx_st_global_v4",
    "ptx_st_global_bytes", "ptx_cp_async", "ptx_cp_async_bulk", "ptx_ld_shared",
    "ptx_st_shared", "ptx_ldmatrix", "ptx_stmatrix", "ptx_bar", "ptx_mbarrier", "ptx_fma_f32",
    "ptx_addmul_f32", "ptx_minmax_f32", "ptx_f16_math", "ptx_int_math", "ptx_sfu", "ptx_cvt",
    "ptx_shfl", "ptx_atomic", "ptx_setp", "ptx_branch",
)

SASS_FEATURES = (
    "sass_instructions", "sass_hgmma", "sass_hmma", "sass_ldg", "sass_stg", "sass_lds",
    "sass_sts", "sass_ldsm", "sass_stsm", "sass_ldl", "sass_stl", "sass_ldgsts", "sass_tma",
    "sass_bar", "sass_syncs", "sass_mufu", "sass_ffma", "sass_fp32", "sass_atomic", "sass_bra",
)

RESOURCE_FEATURES = ("n_regs", "stack_bytes", "local_bytes")

_FLOAT_OPS = frozenset({"add", "sub", "mul", "fma", "mad", "max", "min", "neg", "abs", "div"})
_INT_OPS = frozenset({"add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not", "div",
                      "rem", "min", "max", "neg", "abs", "bfe", "bfi", "prmt", "lop3", "popc",
                      "clz", "shf", "mul24", "mad24", "brev", "bmsk"})
_INT_TYPES = frozenset({"s8", "u8", "s16", "u16", "s32", "u32", "s64", "u64",
                        "b16", "b32", "b64"})
_SFU_OPS = frozenset({"ex2", "lg2", "rcp", "rsqrt", "sqrt", "sin", "cos", "tanh"})
_TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
               "b32": 4, "u32": 4, "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8,
               "b128": 16}
_PRED = re.compile(r"^@!?%\w+\s+")


def ptx_counts(ptx: str) -> dict[str, int]:
    """Instruction counts by class from PTX text (Triton's inline-asm blocks included)."""
    out = dict.fromkeys(PTX_FEATURES, 0)
    for line in ptx.splitlines():
        line = line.strip()
        if not line or line[0] in "./{}()$" or line.endswith(":"):
            continue
        line = _PRED.sub("", line)
        opcode = line.split(None, 1)[0].rstrip(";")
        if not opcode or not opcode[0].isalpha():
            continue
        _classify_ptx(opcode, out)
    return out


def _classify_ptx(opcode: str, out: dict[str, int]) -> None:
    parts = opcode.split(".")
    op, mods = parts[0], parts[1:]
    out["ptx_instructions"] += 1
    if opcode.startswith("wgmma.mma_async"):
        out["ptx_wgmma"] += 1
    elif op == "mma":
        out["ptx_mma"] += 1
    elif op in ("ld", "st") and "global" in mods:
        kind = "ld" if op == "ld" else "st"
        width = 4 if "v4" in mods else 2 if "v2" in mods else 1
        out[f"ptx_{kind}_global"] += 1
        if width > 1 and f"ptx_{kind}_global_v{width}" in out:
            out[f"ptx_{kind}_global_v{width}"] += 1
        out[f"ptx_{kind}_global_bytes"] += width * _TYPE_BYTES.get(mods[-1], 4)
    elif op in ("ld", "st") and any(m.startswith("shared") for m in mods):
        out[f"ptx_{op}_shared"] += 1
    elif op == "cp" and mods[:1] == ["async"]:
        # cp.async.bulk* is TMA; cp.async.ca/cg are Ampere-style async copies. The
        # commit/wait bookkeeping instructions are not copies.
        if "bulk" in mods:
            out["ptx_cp_async_bulk"] += 1
        elif mods[1:2] and mods[1] in ("ca", "cg"):
            out["ptx_cp_async"] += 1
    elif op == "ldmatrix":
        out["ptx_ldmatrix"] += 1
    elif op == "stmatrix":
        out["ptx_stmatrix"] += 1
    elif op in ("bar", "barrier"):
        out["ptx_bar"] += 1
    elif op == "mbarrier":
        out["ptx_mbarrier"] += 1
    elif op in _SFU_OPS:
        out["ptx_sfu"] += 1
    elif op == "cvt":
        out["ptx_cvt"] += 1
    elif op == "shfl":
        out["ptx_shfl"] += 1
    elif op in ("atom", "red"):
        out["ptx_atomic"] += 1
    elif op == "setp":
        out["ptx_setp"] += 1
    elif op == "bra":
        out["ptx_branch"] += 1
    elif op in _FLOAT_OPS and any(m in ("f16", "f16x2", "bf16", "bf16x2") for m in mods):
        out["ptx_f16_math"] += 1
    elif op in _FLOAT_OPS and "f32" in mods:
        if op in ("fma", "mad"):
            out["ptx_fma_f32"] += 1
        elif op in ("max", "min"):
            out["ptx_minmax_f32"] += 1
        else:
            out["ptx_addmul_f32"] += 1
    elif op in _INT_OPS and any(m in _INT_TYPES for m in mods):
        out["ptx_int_math"] += 1


# "/*0080*/   @!P0 LDG.E.128 R4, desc[UR6][R2.64] ;" -> "LDG"
_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
_SASS_CLASSES = {
    "HGMMA": "sass_hgmma", "HMMA": "sass_hmma", "LDG": "sass_ldg", "STG": "sass_stg",
    "LDS": "sass_lds", "STS": "sass_sts", "LDSM": "sass_ldsm", "STSM": "sass_stsm",
    "LDL": "sass_ldl", "STL": "sass_stl", "LDGSTS": "sass_ldgsts", "UTMALDG": "sass_tma",
    "UTMASTG": "sass_tma", "UBLKCP": "sass_tma", "UTMAPF": "sass_tma", "BAR": "sass_bar",
    "SYNCS": "sass_syncs", "MUFU": "sass_mufu", "FFMA": "sass_ffma", "ATOM": "sass_atomic",
    "ATOMG": "sass_atomic", "RED": "sass_atomic", "REDG": "sass_atomic", "BRA": "sass_bra",
}
_SASS_FP32 = frozenset({"FADD", "FMUL", "FFMA", "FMNMX", "FSETP", "FSEL", "FCHK"})


def sass_counts(sass: str) -> dict[str, int]:
    """Opcode counts from ``nvdisasm``/``cuobjdump -sass`` text; NOPs are not instructions."""
    ops = Counter(m.group(1) for m in _SASS_LINE.finditer(sass))
    ops.pop("NOP", None)
    out = dict.fromkeys(SASS_FEATURES, 0)
    out["sass_instructions"] = sum(ops.values())
    for op, n in ops.items():
        name = _SASS_CLASSES.get(op)
        if name is not None:
            out[name] += n
        if op in _SASS_FP32:
            out["sass_fp32"] += n
    return out


def _nvidia_tool(name: str) -> str:
    # The binaries Triton itself resolves (its wheel's, unless TRITON_<TOOL>_PATH overrides).
    from triton import knobs

    return getattr(knobs.nvidia, name).path


def _run_on_cubin(cubin: bytes, args: list[str]) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        done = subprocess.run([*args, path], capture_output=True, text=True, timeout=120,
                              check=True)
        return done.stdout
    finally:
        os.unlink(path)


_RESOURCE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def cubin_resources(cubin: bytes) -> dict[str, int]:
    """Registers, stack frame and local memory per thread of the (single) kernel in a cubin."""
    text = _run_on_cubin(cubin, [_nvidia_tool("cuobjdump"), "--dump-resource-usage"])
    match = _RESOURCE.search(text)
    if match is None:
        raise RuntimeError(f"no resource usage in cuobjdump output: {text[:300]!r}")
    regs, stack, _static_shared, local = map(int, match.groups())
    return {"n_regs": regs, "stack_bytes": stack, "local_bytes": local}


def cubin_sass(cubin: bytes) -> str:
    # -ndf skips data-flow analysis: same listing, about twice as fast.
    return _run_on_cubin(cubin, [_nvidia_tool("nvdisasm"), "-c", "-ndf"])
