"""Op counts from a kernel's Triton IR before PTX: TTIR (the program as written, after inlining and
canonicalization) and TTGIR (after layouts, tensor-core selection, software pipelining and warp
specialization for the config's ``num_warps``/``num_stages``). Both are text Triton keeps in a
compiled kernel's ``asm`` dict; the IR-only compile (``aot.compile_ir``) makes them without PTX
or ptxas. Counts are static (a loop body counts once), like the PTX and SASS counts.

``IR_FEATURES`` names every count, in table order:

TTIR (``ir_``)
  ``ir_ops`` every op; ``ir_dot`` tt.dot / tt.dot_scaled; ``ir_load`` / ``ir_load_masked``
  tt.load (with a mask operand); ``ir_store`` / ``ir_store_masked`` tt.store; ``ir_desc_load`` /
  ``ir_desc_store`` tensor-descriptor (TMA) loads/gathers and stores/scatters/reduces;
  ``ir_desc_args`` ``!tt.tensordesc`` kernel arguments plus tt.make_tensor_descriptor ops;
  ``ir_atomic`` tt.atomic_rmw / tt.atomic_cas; ``ir_reduce`` tt.reduce; ``ir_scan`` tt.scan;
  ``ir_exp`` math.exp / math.exp2; ``ir_math`` other math-dialect ops (log, sqrt, rsqrt, fma,
  ...); ``ir_float_ops`` / ``ir_int_ops`` elementwise arith ops on floats / integers;
  ``ir_for`` scf.for loops; ``ir_for_depth`` deepest scf.for nesting (0: no loop); ``ir_if``
  scf.if; ``ir_while`` scf.while; ``ir_dot_in_loop`` / ``ir_load_in_loop`` /
  ``ir_store_in_loop`` those ops inside some scf.for (a store inside a loop: a persistent or
  multi-row program); ``ir_num_programs`` tt.get_num_programs (persistent tile loops read it);
  ``ir_ws_loops`` loops marked ``tt.warp_specialize``; ``ir_flatten_loops`` loops marked
  ``tt.flatten``.
TTGIR (``ttgir_``)
  ``ttgir_ops`` every op; ``ttgir_num_warps`` the module's ``ttg.num-warps``; ``ttgir_wgmma``
  ttng.warp_group_dot (Hopper wgmma); ``ttgir_dot`` tt.dot left (mma v2 or FMA);
  ``ttgir_async_copy`` ttg.async_copy_global_to_local (cp.async pipelining); ``ttgir_async_wait``
  ttg.async_wait; ``ttgir_tma_load`` / ``ttgir_tma_store`` ttng TMA copies global->shared /
  shared->global (and gather/scatter/reduce); ``ttgir_load`` / ``ttgir_store`` tt.load / tt.store
  left (plain global accesses); ``ttgir_atomic``; ``ttgir_local_alloc`` ttg.local_alloc (shared
  buffers); ``ttgir_local_alloc_bytes`` their total size from the memdesc types (multi-buffering
  included; before the allocator reuses space); ``ttgir_local_load`` / ``ttgir_local_store``;
  ``ttgir_convert_layout`` ttg.convert_layout (layout shuffles through shared memory or
  shuffles); ``ttgir_mbarrier`` ttng barrier ops (init/wait/arrive/expect);
  ``ttgir_fence`` ttng.fence_async_shared; ``ttgir_warp_specialize`` ttg.warp_specialize ops;
  ``ttgir_ws_partitions`` their partitions (not counting the default one); ``ttgir_for`` /
  ``ttgir_for_depth`` loops after pipelining and loop fusion.

>>> text = '''module attributes {"ttg.num-warps" = 4 : i32} {
...   tt.func public @k(%p: !tt.ptr<f16>) attributes {noinline = false} {
...     scf.for %i = %c0 to %n step %c1  : i32 {
...       %x = tt.load %p, %m, %o : tensor<64x!tt.ptr<f16>>
...     } {tt.num_stages = 2 : i32}
...     tt.return
...   }
... }'''
>>> c = ir_counts(text, text)
>>> c["ir_load_masked"], c["ir_for_depth"], c["ir_load_in_loop"], c["ttgir_num_warps"]
(1, 1, 1, 4)
"""

from __future__ import annotations

import re
from collections import Counter

TTIR_FEATURES = (
    "ir_ops", "ir_dot", "ir_load", "ir_load_masked", "ir_store", "ir_store_masked",
    "ir_desc_load", "ir_desc_store", "ir_desc_args", "ir_atomic", "ir_reduce", "ir_scan",
    "ir_exp", "ir_math", "ir_float_ops", "ir_int_ops", "ir_for", "ir_for_depth", "ir_if",
    "ir_while", "ir_dot_in_loop", "ir_load_in_loop", "ir_store_in_loop", "ir_num_programs",
    "ir_ws_loops", "ir_flatten_loops",
)
TTGIR_FEATURES = (
    "ttgir_ops", "ttgir_num_warps", "ttgir_wgmma", "ttgir_dot", "ttgir_async_copy",
    "ttgir_async_wait", "ttgir_tma_load", "ttgir_tma_store", "ttgir_load", "ttgir_store",
    "ttgir_atomic", "ttgir_local_alloc", "ttgir_local_alloc_bytes", "ttgir_local_load",
    "ttgir_local_store", "ttgir_convert_layout", "ttgir_mbarrier", "ttgir_fence",
    "ttgir_warp_specialize", "ttgir_ws_partitions", "ttgir_for", "ttgir_for_depth",
)
IR_FEATURES: list[str] = [*TTIR_FEATURES, *TTGIR_FEATURES]
# 1.0 when the TTIR and TTGIR stages ran (a config Triton rejects before PTX is 0.0).
IR_OK = "ir_ok"

# `%a = op`, `%a:3 = op`, `%a, %b = op`, `"op"(` (generic form), or a bare `op`.
_OP = re.compile(r'^\s*(?:%[\w#:, %]*?=\s*)?"?([a-z_][\w]*\.[\w.]+)"?')
_STRING = re.compile(r'"[^"]*"')
_MEMDESC = re.compile(r"!ttg\.memdesc<([0-9x]+)x([a-z]+)(\d+)")
_NUM_WARPS = re.compile(r'"?ttg\.num-warps"?\s*=\s*(\d+)')
_PARTITION = re.compile(r"\bpartition\d+\(")

_DOTS = frozenset({"tt.dot", "tt.dot_scaled"})
_DESC_LOADS = frozenset({"tt.descriptor_load", "tt.descriptor_gather"})
_DESC_STORES = frozenset({"tt.descriptor_store", "tt.descriptor_scatter",
                          "tt.descriptor_reduce"})
_ATOMICS = frozenset({"tt.atomic_rmw", "tt.atomic_cas"})
_EXP = frozenset({"math.exp", "math.exp2"})
_TMA_LOADS = frozenset({"ttng.async_tma_copy_global_to_local", "ttng.async_tma_gather"})
_TMA_STORES = frozenset({"ttng.async_tma_copy_local_to_global", "ttng.async_tma_scatter",
                         "ttng.async_tma_reduce"})
_MBARRIER = frozenset({"ttng.init_barrier", "ttng.wait_barrier", "ttng.arrive_barrier",
                       "ttng.barrier_expect", "ttng.inval_barrier"})
_INT_SUFFIX = ("i", "si", "ui")


def parse_ops(text: str) -> tuple[list[tuple[str, int, str]], int]:
    """``([(op name, scf.for loops enclosing it, the line)], ttg.num-warps or 0)`` for MLIR
    text in Triton's printed form; ``ValueError`` when the text holds no ``tt.func``."""
    if not isinstance(text, str) or "tt.func" not in text:
        raise ValueError("IR text holds no tt.func: not a Triton TTIR/TTGIR module")
    ops: list[tuple[str, int, str]] = []
    stack: list[str] = []  # the op owning each open region
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "//", "^")):
            continue
        m = _OP.match(line)
        name = m.group(1) if m and not line.startswith("}") else ""
        if name:
            ops.append((name, stack.count("scf.for"), line))
        bare = _STRING.sub("", line)
        delta = bare.count("{") - bare.count("}")
        # `} else {`, `}) {attrs}` and `} partition0(...) {` close and reopen on one line.
        while delta < 0 and stack:
            stack.pop()
            delta += 1
        owner = name or (stack[-1] if stack else "")
        if line.startswith("}") and bare.rstrip().endswith("{") and delta == 0 and stack:
            continue
        stack.extend([owner] * max(delta, 0))
    m = _NUM_WARPS.search(text)
    return ops, int(m.group(1)) if m else 0


def _loop_depth(ops: list[tuple[str, int, str]]) -> int:
    return max((depth + 1 for name, depth, _ in ops if name == "scf.for"), default=0)


def _operands(line: str, name: str) -> int:
    """Operands of a one-line op, before its ``:`` type and any ``{attrs}``."""
    body = line.split(name, 1)[1].split(" : ", 1)[0].split("{", 1)[0]
    return body.count("%")


def _memdesc_bytes(line: str) -> int:
    m = _MEMDESC.search(line)
    if not m:
        return 0
    n = 1
    for dim in m.group(1).split("x"):
        n *= int(dim)
    return n * int(m.group(3)) // 8


def ttir_counts(text: str) -> dict[str, int]:
    """The ``ir_`` counts of TTIR text (TTGIR text works too: same op names)."""
    ops, _ = parse_ops(text)
    names = Counter(name for name, _, _ in ops)
    out = dict.fromkeys(TTIR_FEATURES, 0)
    out["ir_ops"] = len(ops)
    for name, depth, line in ops:
        if name in ("tt.load", "tt.store"):
            key = "ir_load" if name == "tt.load" else "ir_store"
            masked = _operands(line, name) >= (2 if name == "tt.load" else 3)
            out[f"{key}_masked"] += masked
        if depth and (name in _DOTS or name in ("tt.load", "tt.store") or name in _DESC_LOADS
                      or name in _DESC_STORES or name in _ATOMICS):
            kind = ("dot" if name in _DOTS else
                    "load" if name in _DESC_LOADS or name == "tt.load" else "store")
            out[f"ir_{kind}_in_loop"] += 1
        if name == "tt.func":
            out["ir_desc_args"] += line.count("!tt.tensordesc<")
        elif name.startswith("math.") and name not in _EXP:
            out["ir_math"] += 1
        elif name.startswith("arith.") and name != "arith.constant":
            op = name[6:]
            if op.endswith("f") or op in ("truncf", "extf"):
                out["ir_float_ops"] += 1
            elif op.endswith(_INT_SUFFIX):
                out["ir_int_ops"] += 1
    # Loop attributes print after the region closes: `} {tt.warp_specialize, ...}`.
    out["ir_ws_loops"] = min(text.count("tt.warp_specialize"), names["scf.for"])
    out["ir_flatten_loops"] = min(text.count("tt.flatten"), names["scf.for"])
    out.update(ir_dot=sum(names[n] for n in _DOTS), ir_load=names["tt.load"],
               ir_store=names["tt.store"], ir_desc_load=sum(names[n] for n in _DESC_LOADS),
               ir_desc_store=sum(names[n] for n in _DESC_STORES),
               ir_atomic=sum(names[n] for n in _ATOMICS), ir_reduce=names["tt.reduce"],
               ir_scan=names["tt.scan"], ir_exp=sum(names[n] for n in _EXP),
               ir_for=names["scf.for"], ir_for_depth=_loop_depth(ops), ir_if=names["scf.if"],
               ir_while=names["scf.while"], ir_num_programs=names["tt.get_num_programs"])
    out["ir_desc_args"] += names["tt.make_tensor_descriptor"]
    return out


def ttgir_counts(text: str) -> dict[str, int]:
    """The ``ttgir_`` counts of TTGIR text."""
    ops, num_warps = parse_ops(text)
    names = Counter(name for name, _, _ in ops)
    out = dict.fromkeys(TTGIR_FEATURES, 0)
    out.update(
        ttgir_ops=len(ops), ttgir_num_warps=num_warps, ttgir_wgmma=names["ttng.warp_group_dot"],
        ttgir_dot=sum(names[n] for n in _DOTS),
        ttgir_async_copy=names["ttg.async_copy_global_to_local"],
        ttgir_async_wait=names["ttg.async_wait"],
        ttgir_tma_load=sum(names[n] for n in _TMA_LOADS),
        ttgir_tma_store=sum(names[n] for n in _TMA_STORES),
        ttgir_load=names["tt.load"] + sum(names[n] for n in _DESC_LOADS),
        ttgir_store=names["tt.store"] + sum(names[n] for n in _DESC_STORES),
        ttgir_atomic=sum(names[n] for n in _ATOMICS),
        ttgir_local_alloc=names["ttg.local_alloc"],
        ttgir_local_alloc_bytes=sum(_memdesc_bytes(line) for name, _, line in ops
                                    if name == "ttg.local_alloc"),
        ttgir_local_load=names["ttg.local_load"], ttgir_local_store=names["ttg.local_store"],
        ttgir_convert_layout=names["ttg.convert_layout"],
        ttgir_mbarrier=sum(names[n] for n in _MBARRIER),
        ttgir_fence=names["ttng.fence_async_shared"],
        ttgir_warp_specialize=names["ttg.warp_specialize"],
        ttgir_ws_partitions=len(_PARTITION.findall(text)) if names["ttg.warp_specialize"] else 0,
        ttgir_for=names["scf.for"], ttgir_for_depth=_loop_depth(ops))
    return out


def ir_counts(ttir: str, ttgir: str) -> dict[str, int]:
    """Every ``IR_FEATURES`` count of one kernel from its TTIR and TTGIR text."""
    return {**ttir_counts(ttir), **ttgir_counts(ttgir)}
