"""Ahead-of-time compile of one Triton launch for a GPU arch, on a machine without a GPU.

The compiled code depends on how the JIT specializes the arguments: ints equal to 1 become
constants, and ints, pointers and strides divisible by 16 get a divisibility hint that enables
vectorised loads. ``specialize`` runs Triton's own binder and argument packing on the launch's
arguments, so the (signature, constants, attributes) match what ``fn[grid](...)`` compiles on
the GPU. Tensors may live on the CPU or the ``meta`` device: only shapes, strides, dtypes and
pointer offsets matter (a GPU allocation is 512-byte aligned, a meta tensor's base is 0).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import io
import json
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from costtune.build import asm, ir
from costtune.build.errors import classify_error, error_text
from costtune.hardware import H200, known_archs, target
from costtune.types import Status

__all__ = ["CompileJob", "classify_error", "compile_ir", "compile_job", "ir_texts",
           "kernel_source_hash", "spec_text", "specialize"]

# Bumped when the parsed feature set changes, so cached JSON from an older parser is not reused.
# 2: records carry the TTIR/TTGIR op counts (costtune.build.ir.IR_FEATURES).
PARSER_VERSION = 2

# Opt-in shared memory per block (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN), which
# is what Triton checks when it loads a kernel. Unknown archs are never flagged.
REGS_PER_SM = H200.regs_per_sm


@dataclass
class CompileJob:
    """Everything ``triton.compile`` needs, as plain picklable values (the kernel by name)."""

    fn_module: str
    fn_name: str
    signature: dict[str, str]
    constexprs: dict[tuple, Any]
    attrs: dict[tuple, Any]
    options: dict[str, Any]
    arch: int
    key: str
    spec: str = field(repr=False, default="")
    # The function itself, for a compile in this process (threads): a user's kernel need not
    # be reachable by module and name (a closure, a shadowed name). Not for process pools.
    fn: Any = field(repr=False, default=None, compare=False)

    def resolve_fn(self) -> Any:
        if self.fn is not None:
            return self.fn
        return getattr(importlib.import_module(self.fn_module), self.fn_name)


@lru_cache(maxsize=64)
def _binder(fn: Any, arch: int) -> tuple[Any, Any, Any]:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    return target, backend, create_function_from_signature(fn.signature, fn.params, backend)


def jit_function(fn: Any) -> Any:
    """The JITFunction under ``fn`` (autotune/heuristics wrappers keep it in ``.fn``)."""
    from triton.runtime.jit import JITFunction

    while not isinstance(fn, JITFunction):
        inner = getattr(fn, "fn", None)
        if inner is None:
            raise TypeError(f"{fn!r} is not a @triton.jit function")
        fn = inner
    return fn


def specialize(call: Any, *, arch: int = 90) -> CompileJob:
    """The compile job the JIT would create for ``call`` (a KernelCall) on an sm_``arch`` GPU."""
    import triton
    from triton import knobs
    from triton.compiler import ASTSource

    fn = jit_function(call.fn)
    _, backend, binder = _binder(fn, arch)
    # The same option dict JITFunction.run builds before binding.
    kwargs = {**call.kwargs, "num_warps": call.num_warps, "num_stages": call.num_stages}
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    bound, specialization, bind_options = binder(*call.args, **kwargs)
    # Triton's own packing (private in 3.6, pinned): copying it would drift on upgrade.
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound,
                                                          specialization, bind_options)
    src_hash = ASTSource(fn, signature, constexprs, attrs).hash()
    opts = {k: v for k, v in options.__dict__.items() if k != "extern_libs"}
    key_text = json.dumps({"src": src_hash, "options": opts, "arch": arch,
                           "triton": triton.__version__, "parser": PARSER_VERSION},
                          sort_keys=True, default=str)
    option_kwargs = {k: v for k, v in kwargs.items() if k in options.__dict__}
    return CompileJob(fn_module=fn.fn.__module__, fn_name=fn.fn.__name__, signature=signature,
                      constexprs=constexprs, attrs=attrs, options=option_kwargs, arch=arch,
                      key=hashlib.sha256(key_text.encode()).hexdigest()[:32],
                      spec=spec_text(signature, constexprs, attrs))


def kernel_source_hash(fn: Any) -> str:
    """sha256 over the source of every Triton function in ``fn``'s module: it changes when any
    kernel there changes but, unlike ``fn.cache_key``, not when code merely moves lines."""
    module = importlib.import_module(fn.fn.__module__ if hasattr(fn, "fn") else fn.__module__)
    h = hashlib.sha256()
    for name, value in sorted(vars(module).items()):
        raw = getattr(value, "fn", None)
        if inspect.isfunction(raw) and raw.__module__ == module.__name__:
            h.update(f"{name}\n{inspect.getsource(raw)}".encode())
    return h.hexdigest()[:16]


def spec_text(signature: dict[str, str], constexprs: dict, attrs: dict) -> str:
    """Canonical text of a specialization; ``kernel.src`` of a GPU-compiled kernel gives the
    same three dicts (``signature``, ``constants``, ``attrs``), so the two compare as text."""
    def plain(d: dict) -> dict[str, Any]:
        return {",".join(map(str, k)): str(v) for k, v in sorted(d.items())}

    return json.dumps({"signature": signature, "constexprs": plain(constexprs),
                       "attrs": plain(attrs)}, sort_keys=True)


def compile_job(job: CompileJob, *, sass: bool = True, quiet: bool = True) -> dict[str, Any]:
    """Compile ``job`` and return its features as a flat JSON-able dict with ``status``.

    Never raises for a bad config: compile errors, ptxas errors and resource overflows that
    the GPU would refuse at load time come back as a status and an error message. ``quiet``:
    swallow what Triton prints (the whole PTX on a ptxas failure); it redirects the process's
    stdout, so threads compiling side by side pass False.
    """
    import triton
    from triton.compiler import ASTSource

    start = time.perf_counter()
    out: dict[str, Any] = {"status": Status.OK.value, "error": ""}
    try:
        fn = job.resolve_fn()
        target, backend, _ = _binder(jit_function(fn), job.arch)
        options = backend.parse_options(dict(job.options))
        src = ASTSource(jit_function(fn), job.signature, job.constexprs, job.attrs)
        # Triton prints the whole PTX on a ptxas failure; the error message is enough.
        with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
            kernel = triton.compile(src, target=target, options=options.__dict__)
        out["shared_bytes"] = int(kernel.metadata.shared)
        out.update(asm.cubin_resources(kernel.asm["cubin"]))
        out.update(asm.ptx_counts(kernel.asm["ptx"]))
        out.update(ir.ir_counts(kernel.asm["ttir"], kernel.asm["ttgir"]))
        if sass:
            out.update(asm.sass_counts(asm.cubin_sass(kernel.asm["cubin"])))
        _check_load_limits(out, num_warps=options.num_warps, arch=job.arch)
    except Exception as exc:  # every failure is a row
        out["status"] = classify_error(exc).value
        out["error"] = error_text(exc)
    out["compile_s"] = time.perf_counter() - start
    return out


def ir_texts(job: CompileJob) -> dict[str, str]:
    """``{"ttir": text, "ttgir": text}`` of ``job``: only those two stages of its compile run
    (no LLVM, PTX or ptxas). They are the backend's own stages (``backend.add_stages``), run the
    way ``triton.compile`` runs them, so the text equals ``kernel.asm["ttir"]``/``["ttgir"]``
    of a full compile. Raises what the compile raises."""
    from triton._C.libtriton import ir as tir
    from triton.compiler import ASTSource

    fn = jit_function(job.resolve_fn())
    target, backend, _ = _binder(fn, job.arch)
    options = backend.parse_options(dict(job.options))
    src = ASTSource(fn, job.signature, job.constexprs, job.attrs)
    stages: dict[str, Any] = {}
    backend.add_stages(stages, options, src.language)
    context = tir.context()
    tir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(target, options, backend.get_codegen_implementation(options),
                         backend.get_module_map(), context)
    metadata: dict[str, Any] = {"target": target, **options.__dict__}
    texts = {}
    for stage in ("ttir", "ttgir"):  # each stage rewrites the module in place
        module = stages[stage](module, metadata)
        texts[stage] = str(module)
    return texts


def compile_ir(job: CompileJob) -> dict[str, Any]:
    """``status``, ``error``, ``compile_s`` and the ``ir.IR_FEATURES`` counts of ``job`` from
    ``ir_texts``. Never raises for a bad config: what fails before TTGIR is a failure record;
    what only later stages find (ptxas limits, shared memory over the block limit) is not seen.
    """
    start = time.perf_counter()
    out: dict[str, Any] = {"status": Status.OK.value, "error": ""}
    try:
        texts = ir_texts(job)
        out.update(ir.ir_counts(texts["ttir"], texts["ttgir"]))
    except Exception as exc:  # every failure is a row
        out["status"] = classify_error(exc).value
        out["error"] = error_text(exc)
    out["compile_s"] = time.perf_counter() - start
    return out


def _check_load_limits(out: dict[str, Any], *, num_warps: int, arch: int) -> None:
    """What CompiledKernel._init_handles checks on the GPU: the CPU compile cannot see it."""
    limit = target(arch).max_shared_per_block if arch in known_archs() else None
    if limit is not None and out["shared_bytes"] > limit:
        out["status"] = Status.OUT_OF_RESOURCES.value
        out["error"] = (f"OutOfResources: out of resource: shared memory, Required: "
                        f"{out['shared_bytes']}, Hardware limit: {limit}")
    elif regs_per_warp(out["n_regs"]) * num_warps > REGS_PER_SM:
        out["status"] = Status.OUT_OF_RESOURCES.value
        out["error"] = f"OutOfResources: out of resource: threads ({out['n_regs']} registers)"


def regs_per_warp(n_regs: int) -> int:
    """Registers a warp holds: per-thread count times 32, allocated in units of 256."""
    return -(-n_regs * 32 // 256) * 256
