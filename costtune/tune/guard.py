"""The correctness guard behind ``costtune.autotune(check=...)``: on a tuning call, every config
that benchmarked is also launched once on the call's own inputs and its outputs are compared,
with the other configs' (majority vote) or with a reference the user gives. A config whose
outputs disagree (NaN where the others are finite, a large error) cannot win.

``check``:

- ``True``: outputs are detected and compared across configs.
- a dict with any of
  ``outputs``: names of the kernel arguments it writes (default: every tensor argument, or
  tensor under a TMA descriptor argument, whose contents a launch changes, found by comparing
  each with a copy taken before);
  ``reference``: ``fn(args) -> Tensor | Sequence[Tensor] | dict[name, Tensor]``, called once
  with the call's arguments by name (copies of the tensors as they were before any config
  ran; a TMA descriptor argument as its tensor), giving the expected outputs in ``outputs``
  order (one tensor: the one output); without it, configs vote;
  ``rtol``, ``atol``: two outputs agree when their non-finite entries match and
  ``||a - b|| <= rtol * max(||a||, ||b||) + atol * sqrt(numel)`` (default rtol 1e-2, 5e-2 for
  bfloat16, 1e-1 for 8-bit floats; atol 0; integer and bool outputs must match exactly).

Votes: a config with NaN where another config has none is wrong, however many agree with it;
among the others, outputs that agree form a group, and the largest group, if it holds more
than half of them, is right and every config outside it is wrong; without such a majority, a
config with NaN/inf where another is finite is wrong (an inf can be right: a fully masked
row's log-sum-exp). With fewer than three
voters ``costtune.autotune`` launches more configs (untimed) to vote. Every input tensor is put
back as it was before each check launch and after the last, so in-place kernels see the same
inputs; outputs are read right after the launch, before autotune's post_hook (``restore_value``
puts in-place outputs back there). A reference whose tensors have other shapes than the
kernel's outputs is a ValueError. Times read from Triton's disk cache (``cache_results=True``)
may come from a process that did not check: each config they hold is launched once and judged
before one is chosen.

>>> spec = check_spec({"outputs": ["c_ptr"], "rtol": 1e-3})
>>> spec.outputs, spec.rtol
(('c_ptr',), 0.001)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CheckError", "CheckSpec", "OutputGuard", "check_spec", "tensors_of"]

_KEYS = ("outputs", "reference", "rtol", "atol")
_RTOL = {"bfloat16": 5e-2, "float8_e4m3fn": 1e-1, "float8_e5m2": 1e-1,
         "float8_e4m3fnuz": 1e-1, "float8_e5m2fnuz": 1e-1}
MIN_VOTERS = 3
MAX_GROUPS = 16  # distinct outputs kept for comparison; more are wrong unless a majority forms


@dataclass(frozen=True)
class CheckSpec:
    outputs: tuple[str, ...] | None = None
    reference: Callable[[dict[str, Any]], Any] | None = None
    rtol: float | None = None
    atol: float = 0.0


def check_spec(check: Any) -> CheckSpec | None:
    """The parsed ``check=`` option (None when off); ValueError naming what is wrong."""
    if check is None or check is False:
        return None
    if check is True:
        return CheckSpec()
    if not isinstance(check, Mapping):
        raise ValueError(f"check must be True, False or a dict with keys {list(_KEYS)}, "
                         f"got {type(check).__name__}")
    unknown = sorted(set(check) - set(_KEYS))
    if unknown:
        raise ValueError(f"unknown check key(s) {unknown}; use {list(_KEYS)}")
    outputs = check.get("outputs")
    if outputs is not None:
        if isinstance(outputs, str):
            outputs = [outputs]
        if not outputs or not all(isinstance(o, str) for o in outputs):
            raise ValueError(f"check outputs must be argument names, got {outputs!r}")
        outputs = tuple(outputs)
    reference = check.get("reference")
    if reference is not None and not callable(reference):
        raise ValueError("check reference must be a callable(args) returning the outputs")
    rtol, atol = check.get("rtol"), check.get("atol", 0.0)
    for name, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not value >= 0):
            raise ValueError(f"check {name} must be a number >= 0, got {value!r}")
    return CheckSpec(outputs, reference, None if rtol is None else float(rtol), float(atol))


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "clone") and hasattr(value, "copy_") and hasattr(value, "dtype")


def tensors_of(args: Mapping[str, Any]) -> dict[str, Any]:
    """The tensors a launch can read or write, by argument name: tensor arguments, and the
    tensor under a TMA descriptor argument (``TensorDescriptor.base``), named as the
    descriptor (``check={"outputs": ["desc_o"]}``)."""
    out = {}
    for name, value in args.items():
        if _is_tensor(value):
            out[name] = value
        elif _is_tensor(getattr(value, "base", None)):
            out[name] = value.base
    return out


def _agree(a: Any, b: Any, *, rtol: float | None, atol: float) -> bool:
    import torch

    if a.shape != b.shape:
        return False
    if not (a.is_floating_point() or a.is_complex()):
        return bool(torch.equal(a, b.to(a.dtype)))
    name = str(a.dtype).removeprefix("torch.")
    tol = _RTOL.get(name, 1e-2) if rtol is None else rtol
    a64, b64 = a.detach().double(), b.detach().double().to(a.device)
    fa, fb = torch.isfinite(a64), torch.isfinite(b64)
    if not torch.equal(fa, fb):
        return False
    # Same non-finite entries: NaN where NaN, inf of the same sign.
    if not bool((torch.isnan(a64) == torch.isnan(b64)).all()) or not bool(
            (a64[~fa & ~torch.isnan(a64)] == b64[~fb & ~torch.isnan(b64)]).all()):
        return False
    diff = float(torch.linalg.vector_norm((a64 - b64)[fa]))
    scale = max(float(torch.linalg.vector_norm(a64[fa])), float(torch.linalg.vector_norm(b64[fb])))
    return diff <= tol * scale + atol * math.sqrt(max(1, a64.numel()))


def _has_nan(outputs: Mapping[str, Any]) -> bool:
    import torch

    return any(bool(torch.isnan(t).any()) for t in outputs.values()
               if t.is_floating_point() or t.is_complex())


def _finite(outputs: Mapping[str, Any]) -> bool:
    import torch

    return all(bool(torch.isfinite(t).all()) for t in outputs.values()
               if t.is_floating_point() or t.is_complex())


class OutputGuard:
    """Compares the outputs of one tuning call's configs. ``args``: the call's arguments by
    name (the kernel's positional args and keyword args)."""

    def __init__(self, spec: CheckSpec, args: Mapping[str, Any]) -> None:
        self.spec = spec
        self.tensors = tensors_of(args)
        missing = [o for o in spec.outputs or () if o not in self.tensors]
        if missing:
            raise ValueError(f"check outputs {missing} are not tensor arguments of the kernel "
                             f"(tensor arguments: {sorted(self.tensors)})")
        self.before = {k: v.clone() for k, v in self.tensors.items()}
        self.records: dict[str, bool] = {}  # config text -> its outputs are all finite
        self.nan: dict[str, bool] = {}  # config text -> its outputs hold a NaN
        self.groups: list[tuple[dict[str, Any], list[str]]] = []  # (outputs, members)
        self.wrong: dict[str, str] = {}
        self._expected: dict[str, Any] | None = None
        if spec.reference is not None:
            self._expected = self._reference(dict(args))

    def restore(self) -> None:
        """Every tensor argument back to its contents before tuning."""
        for name, tensor in self.tensors.items():
            tensor.copy_(self.before[name])

    def _reference(self, args: dict[str, Any]) -> dict[str, Any]:
        got = self.spec.reference({**args, **{k: v.clone() for k, v in self.before.items()}})
        names = list(self.spec.outputs or ())
        if isinstance(got, Mapping):
            expected = dict(got.items())
        else:
            got = [got] if _is_tensor(got) else list(got)
            if not names and len(got) == 1:
                return {"": got[0]}  # matched to the one output the launches write
            if len(got) != len(names):
                raise ValueError(f"check reference returned {len(got)} tensors for outputs "
                                 f"{names}; name the outputs with check={{'outputs': [...]}}")
            expected = dict(zip(names, got))
        for name, ref in expected.items():
            if name in self.tensors:
                _check_shape(name, ref, self.tensors[name])
        return expected

    def record(self, name: str, launch: Callable[[Callable[[], None]], Any]) -> None:
        """Run ``launch`` (one launch of config ``name``) on the original inputs and judge or
        group its outputs. ``launch`` gets a callable to run right after the kernel and
        before any post-launch hook: the outputs are read there (autotune's
        ``restore_value`` puts in-place outputs back in its post_hook)."""
        self.restore()
        taken: list[dict[str, Any]] = []
        launch(lambda: taken.append(self._outputs()))
        out = taken[0] if taken else self._outputs()
        written = self._written(out)
        self.records[name] = _finite(written)
        self.nan[name] = _has_nan(written)
        if self._expected is not None:
            why = self._against_reference(out)
            if why:
                self.wrong[name] = why
            return
        for outputs, members in self.groups:
            if self._same_outputs(out, outputs):
                members.append(name)
                return
        if len(self.groups) < MAX_GROUPS:
            self.groups.append((out, [name]))

    def _outputs(self) -> dict[str, Any]:
        if self.spec.outputs is not None:
            return {k: self.tensors[k].clone() for k in self.spec.outputs}
        return {k: t.clone() for k, t in self.tensors.items() if not _same(t, self.before[k])}

    def _written(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """``outputs`` with the NaN/inf elements the launch left as they were before it set
        to 0: a workspace that starts as NaN (``torch.empty`` can) and that a config writes
        only in part (fewer splits) holds no NaN of that config's making."""
        import torch

        out = dict(outputs)
        for name, t in outputs.items():
            if t.is_floating_point() or t.is_complex():  # outputs are clones of the arguments
                b = self.before[name]
                kept = ~torch.isfinite(b) & ((t == b) | (torch.isnan(t) & torch.isnan(b)))
                if bool(kept.any()):
                    out[name] = torch.where(kept, torch.zeros_like(t), t)
        return out

    def _value(self, outputs: Mapping[str, Any], name: str) -> Any:
        return outputs[name] if name in outputs else self.before[name]

    def _same_outputs(self, a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
        return all(_agree(self._value(a, n), self._value(b, n), rtol=self.spec.rtol,
                          atol=self.spec.atol) for n in set(a) | set(b))

    def _against_reference(self, out: Mapping[str, Any]) -> str:
        expected = dict(self._expected or {})
        if "" in expected:
            if len(out) != 1:
                return (f"cannot match the reference's one tensor to the {len(out)} outputs "
                        f"{sorted(out)}; name them with check={{'outputs': [...]}}")
            expected = {next(iter(out)): expected[""]}
        for name, ref in expected.items():
            got = self._value(out, name) if name in self.tensors else None
            if got is None:
                return f"the reference names {name!r}, not a tensor argument"
            _check_shape(name, ref, got)
            if not _agree(got, ref, rtol=self.spec.rtol, atol=self.spec.atol):
                what = "NaN/inf" if not _finite({name: got}) else "a large error"
                return f"{name} has {what} against the reference"
        return ""

    def judge(self) -> dict[str, str]:
        """{config: why it is wrong} over every config recorded so far: NaN where another
        config has none first, then the majority vote among the others; without a majority,
        NaN/inf where another config is finite (an inf may be right: a masked row's LSE)."""
        if self._expected is not None:
            return dict(self.wrong)
        out = self._non_finite()
        voters = [n for n in self.records if n not in out]
        grouped = {m for _, members in self.groups for m in members}
        biggest = self._biggest(out)
        if 2 * len(biggest) > len(voters):
            for name in voters:
                if name not in biggest:
                    detail = "" if name in grouped else " (one of too many distinct outputs)"
                    out[name] = (f"its outputs disagree with {len(biggest)} of "
                                 f"{len(voters)} configs{detail}")
        elif any(self.records[n] for n in voters):
            out.update((n, "NaN/inf in its outputs where other configs are finite")
                       for n in voters if not self.records[n])
        return out

    def _non_finite(self) -> dict[str, str]:
        if all(self.nan.values()):
            return {}
        return {n: "NaN in its outputs where other configs have none"
                for n, nan in self.nan.items() if nan}

    def _biggest(self, excluded: Mapping[str, str]) -> list[str]:
        groups = [[m for m in members if m not in excluded] for _, members in self.groups]
        return max(groups, key=len, default=[])

    def undecided(self) -> str:
        """Why the vote could not tell right outputs from wrong ("" when it could, or with a
        reference): the configs that ran and ``judge`` did not reject disagree, and no group
        of them is a majority."""
        if self._expected is not None:
            return ""
        wrong = self.judge()
        voters = [n for n in self.records if n not in wrong]
        grouped = {m for _, members in self.groups for m in members}
        sizes = sorted([len([m for m in members if m not in wrong]) for _, members in self.groups]
                       + [1] * sum(n not in grouped for n in voters), reverse=True)
        sizes = [n for n in sizes if n]
        if len(sizes) < 2 or 2 * sizes[0] > len(voters):
            return ""
        rest = " left" if wrong else ""
        return (f"check= could not tell right outputs from wrong: the {len(voters)} configs"
                f"{rest} disagree, in groups of {', '.join(map(str, sizes))} with no majority, "
                "so the fastest of them is used; pass check={'reference': fn} to decide")

    @property
    def decided(self) -> bool:
        """Whether the votes so far give a majority (always with a reference)."""
        if self._expected is not None:
            return True
        out = self._non_finite()
        return 2 * len(self._biggest(out)) > len(self.records) - len(out)


class CheckError(ValueError):
    """The user's ``check=`` reference cannot be compared with the kernel's outputs."""


def _check_shape(name: str, ref: Any, got: Any) -> None:
    """ValueError when the reference's ``name`` cannot be compared with the kernel's."""
    shape = getattr(ref, "shape", None)
    if shape is None or tuple(shape) != tuple(got.shape):
        what = f"shape {tuple(shape)}" if shape is not None else type(ref).__name__
        raise CheckError(f"check reference gives {name or 'its output'} as {what}, but the "
                         f"kernel's {name or 'output'} has shape {tuple(got.shape)}")


def _same(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a, b)) if a.dtype == b.dtype else False
