"""Config and launch names in a family's terms: which config parameter (or launch kwarg) is the
family's ``BLOCK_M``, which names are knobs no model has learned, and a likely mapping when
none of the known spellings (``costtune.kernels.base.PARAM_NAMES``) is there.

>>> m = map_params("gemm", ["BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M"],
...                {}, user={})
>>> m.rename["BLOCK_SIZE_M"], m.knobs
('BLOCK_M', ('GROUP_SIZE_M',))
>>> map_params("softmax", [], {"BLOCK_SIZE": 1024, "n_cols": 1000}, user={}).meta
{'BLOCK_N': 1024}
>>> likely_mapping("gemm", ["BLK_M", "BLK_N", "BLK_K"])
{'BLK_M': 'BLOCK_M', 'BLK_N': 'BLOCK_N', 'BLK_K': 'BLOCK_K'}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costtune.kernels.base import KNOWN_KNOBS, LAUNCH_OPTION_DEFAULTS, PARAM_NAMES
from costtune.tune.sizes import NotApplicable

# Per family: parameters a config must give, and those with a neutral value when absent.
FAMILY_PARAMS: dict[str, tuple[tuple[str, ...], dict[str, int]]] = {
    "gemm": (("BLOCK_M", "BLOCK_N", "BLOCK_K"), {"SPLIT_K": 1}),
    "softmax": (("BLOCK_N",), {"ROWS_PER_PROG": 1}),
    "attention": (("BLOCK_M", "BLOCK_N"), {}),
}
# Every spelling of any family's tile parameters: a config naming one that the family being
# tried does not use belongs to another family (a softmax has no BLOCK_K).
_ANY_TILE = frozenset(n for fam in PARAM_NAMES.values() for names in fam.values() for n in names)
# For a likely mapping: how an unknown name ends when it is a family parameter.
_AXIS = {"BLOCK_M": ("M",), "BLOCK_N": ("N",), "BLOCK_K": ("K",), "SPLIT_K": ("SPLITK",),
         "ROWS_PER_PROG": ("ROWS", "ROW", "X")}
_TILE_PREFIXES = ("BLOCK", "BLK", "TILE", "B", "T", "SIZE")


@dataclass(frozen=True)
class ParamMap:
    """``rename``: config name -> family parameter; ``meta``: family parameters fixed at the
    launch (a kwarg such as tutorial 02's ``BLOCK_SIZE=next_power_of_2(n_cols)``);
    ``origin``: family parameter -> where it came from; ``missing``: required parameters
    found nowhere; ``knobs``: config names of ``KNOWN_KNOBS``; ``unknown``: the rest;
    ``by_rule``: family parameter -> the ``triton.heuristics`` value that sets it at each
    launch (evaluated per config: ``heuristic_values``)."""

    family: str
    rename: dict[str, str]
    meta: dict[str, Any]
    origin: dict[str, str]
    missing: tuple[str, ...]
    knobs: tuple[str, ...]
    unknown: tuple[str, ...]
    by_rule: dict[str, str] = field(default_factory=dict)

    def foreign_tiles(self) -> list[str]:
        """Unknown config names that are another family's tile parameters."""
        return [n for n in self.unknown if n in _ANY_TILE]


def map_params(family: str, config_names: Iterable[str], args: Mapping[str, Any], *,
               user: Mapping[str, str], constants: Mapping[str, int] | None = None,
               rules: Iterable[str] = ()) -> ParamMap:
    """How the configs' names, the values ``triton.heuristics`` sets (``rules``: their names;
    at a launch they override the config's), the launch's integer kwargs and the kernel's own
    integer constexprs (``constants``) give ``family``'s parameters; ``user`` (``params=``)
    wins over the known spellings."""
    constants = constants or {}
    rules = set(rules)
    by_rule: dict[str, str] = {}
    names = list(dict.fromkeys(config_names))
    required, neutral = FAMILY_PARAMS[family]
    rename: dict[str, str] = {}
    meta: dict[str, Any] = {}
    origin: dict[str, str] = {}
    missing = []
    for param in (*required, *neutral):
        spellings = [u for u, f in user.items() if f == param]
        spellings += [n for n in PARAM_NAMES[family].get(param, ()) if n not in user]
        # The first spelling (the user's first) that a rule or a config gives; a rule wins over
        # a config value of the same name, as at the launch.
        found = next((n for n in spellings if (n in rules and n not in by_rule.values())
                      or (n in names and n not in rename)), None)
        if found is not None and found in rules:
            by_rule[param] = found
            origin[param] = f"triton.heuristics {found}" + (" (params=)" if found in user
                                                            else "")
            continue
        in_config = found
        if in_config is not None:
            rename[in_config] = param
            origin[param] = f"config {in_config}" + (" (params=)" if in_config in user else "")
            continue
        at_launch = next((n for n in spellings if _is_int(args.get(n))), None)
        in_body = next((n for n in spellings if _is_int(constants.get(n))), None)
        if at_launch is not None:
            meta[param] = int(args[at_launch])
            origin[param] = f"launch {at_launch}={args[at_launch]}"
        elif in_body is not None:
            meta[param] = int(constants[in_body])
            origin[param] = f"kernel constant {in_body}={constants[in_body]}"
        elif param in required:
            missing.append(param)
    for option in ("num_warps", "num_stages"):  # a rule may set the launch's options too
        if option in rules:
            by_rule[option] = option
            origin[option] = f"triton.heuristics {option}"
    # A config value a rule overrides at the launch is neither a knob nor unknown.
    rest = [n for n in names if n not in rename and n not in by_rule.values()]
    knobs = tuple(n for n in rest if n in KNOWN_KNOBS or n in LAUNCH_OPTION_DEFAULTS)
    unknown = tuple(n for n in rest if n not in knobs)
    return ParamMap(family, rename, meta, origin, tuple(missing), knobs, unknown, by_rule)


def likely_mapping(family: str, names: Iterable[str]) -> dict[str, str]:
    """``params=`` that would likely map ``names`` (config names no spelling matched) onto
    ``family``'s parameters: a tile-like name ending in the parameter's axis (``BLK_M``,
    ``TILE_SIZE_N``); for a softmax, a lone tile-like name is the column block."""
    required, neutral = FAMILY_PARAMS[family]
    pool = [n for n in dict.fromkeys(names) if n not in KNOWN_KNOBS]
    out: dict[str, str] = {}
    for param in (*required, *neutral):
        for name in pool:
            flat = name.upper().replace("_", "")
            if name in out or not flat.startswith(_TILE_PREFIXES):
                continue
            if flat.endswith(_AXIS[param]):
                out[name] = param
                break
    if family == "softmax" and "BLOCK_N" not in out.values():
        tiles = [n for n in pool if n not in out
                 and n.upper().replace("_", "").startswith(_TILE_PREFIXES)]
        if len(tiles) == 1:
            out[tiles[0]] = "BLOCK_N"
    return out


def mapping_hint(family: str, names: Iterable[str], missing: Iterable[str]) -> str:
    """``params={...}`` text for a message: the likely mapping, else a template."""
    likely = likely_mapping(family, names)
    if likely and set(missing) <= set(likely.values()):
        return f"params={likely!r}"
    first = next(iter(missing), "BLOCK_N")
    return f"params={{'YOUR_NAME': '{first}'}}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def family_params(family: str, configs: Sequence[Any], *, rename: Mapping[str, str],
                  meta: Mapping[str, Any] | None = None,
                  set_by_rules: Sequence[Mapping[str, Any] | None] | None = None
                  ) -> list[dict[str, Any]]:
    """Per config: the family's parameters (set by a ``triton.heuristics`` rule at the launch,
    ``set_by_rules[i]``; else renamed from the config; else fixed at the launch, ``meta``;
    else their neutral value) plus num_warps and num_stages (a rule's, else the config's).
    Names the family does not know are left out. ``set_by_rules[i]`` None: config i's rules
    failed (it cannot launch), and a required parameter nothing else gives is None."""
    required, neutral = FAMILY_PARAMS[family]
    meta = dict(meta or {})
    out = []
    for i, c in enumerate(configs):
        kw = {rename.get(k, k): unwrapped(v) for k, v in c.kwargs.items()}
        ruled = set_by_rules[i] if set_by_rules is not None else {}
        kw.update(ruled or {})
        missing = [p for p in required if p not in kw and p not in meta]
        if missing and ruled is not None:
            raise NotApplicable("params", f"config {dict(c.kwargs)} lacks {family} "
                                f"parameter(s) {missing}; map yours with "
                                f"{mapping_hint(family, c.kwargs, missing)}")
        d = {p: kw.get(p, meta.get(p)) for p in required}
        d.update((p, kw.get(p, meta.get(p, v))) for p, v in neutral.items())
        d["num_warps"] = kw.get("num_warps", c.num_warps)
        d["num_stages"] = kw.get("num_stages", c.num_stages)
        out.append(d)
    return out


def unwrapped(value: Any) -> Any:
    """A config value as the kernel gets it: ``tl.constexpr(64)`` is 64 (Triton's JIT unwraps
    it at the launch)."""
    return value.value if type(value).__name__ == "constexpr" and hasattr(value, "value") \
        else value


def launch_params(launch: Any, configs: Sequence[Any]) -> list[dict[str, Any]]:
    """``family_params`` of a described launch (``tune.launch.Launch``), with the values its
    ``triton.heuristics`` rules set for each config (``rule_values``)."""
    if not getattr(launch, "rules", ()):
        return family_params(launch.family, configs, rename=launch.rename, meta=launch.meta)
    values, _ = rule_values(launch, configs)
    return family_params(launch.family, configs, rename=launch.rename, meta=launch.meta,
                         set_by_rules=values)


def rule_values(launch: Any, configs: Sequence[Any]
                ) -> tuple[list[dict[str, int] | None], dict[int, str]]:
    """Per config the values the launch's ``triton.heuristics`` rules set for it
    (``heuristic_values``; None where they fail) and {position: why} for those: a config
    whose rule raises, or gives what is no valid parameter, cannot launch."""
    values: list[dict[str, int] | None] = []
    failed: dict[int, str] = {}
    if not getattr(launch, "rules", ()):
        return [{} for _ in configs], failed
    for i, c in enumerate(configs):
        try:
            values.append(heuristic_values(launch, c))
        except Exception as exc:  # the user's rule, on this call's arguments
            values.append(None)
            failed[i] = (str(exc) if isinstance(exc, RuleValueError) else
                         f"its triton.heuristics rule raised {type(exc).__name__}: {exc}")
    return values, failed


class RuleValueError(ValueError):
    """A ``triton.heuristics`` rule gave a value no launch can take."""


def heuristic_values(launch: Any, config: Any) -> dict[str, int]:
    """The family parameters (and launch options) the launch's ``triton.heuristics`` rules
    set for ``config``, as Triton's ``Heuristics.run`` computes them: each rule, outer first,
    reads the call's arguments, the config's values (launch options included) and the values
    set before it. RuleValueError when a value is no positive integer (no float, no bool) or
    a num_warps no power of two; a rule's own exception propagates."""
    kw = rule_outputs(launch, config)
    out = {}
    for param, name in launch.by_rule.items():
        value = kw[name]
        least = 0 if param == "num_stages" else 1
        if (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                or value < least or (param == "num_warps" and value & (value - 1))):
            raise RuleValueError(f"triton.heuristics {name} = {value!r} is no valid {param}")
        out[param] = int(value)
    return out


def launched_values(launch: Any, configs: Sequence[Any]) -> list[dict[str, Any]] | None:
    """Per config its values as its launch passes them: kwargs, num_warps, num_stages and the
    other launch options, after the launch's ``triton.heuristics`` rules (a rule may override
    a config value, ``BLOCK_SIZE = next_power_of_2(n_cols)``), and every value a rule sets
    (``EVEN_N``: two configs a rule clamps to one block may still differ there); a config
    whose rules fail keeps its own values. None when the launch has no rules."""
    if not getattr(launch, "rules", ()):
        return None
    names = list(dict.fromkeys(name for name, _ in launch.rules))
    out = []
    for c in configs:
        own = {**dict(c.kwargs), "num_warps": c.num_warps, "num_stages": c.num_stages,
               **{k: getattr(c, k, v) for k, v in LAUNCH_OPTION_DEFAULTS.items()}}
        try:
            ruled = rule_outputs(launch, c)
        except Exception:  # cannot launch: refused elsewhere, with the reason
            ruled = {}
        own.update((k, ruled[k]) for k in names if k in ruled)
        out.append(own)
    return out


def values_key(values: Mapping[str, Any]) -> str:
    """A key equal for two ``launched_values`` dicts exactly when they launch alike (any
    value type: a rule may give a bool or a string; a refused config's None)."""
    return repr(sorted((str(k), repr(v)) for k, v in values.items()
                       if LAUNCH_OPTION_DEFAULTS.get(k, object()) != v))


def rule_outputs(launch: Any, config: Any) -> dict[str, Any]:
    """What ``config``'s launch passes the kernel: the call's arguments and the config's
    values (launch options included) after every ``triton.heuristics`` rule, outer first, set
    its value from them and the values set before it (Triton's ``Heuristics.run``); a rule's
    exception propagates. Kept in the launch's ``outputs`` (per config, for its one call)."""
    memo = getattr(launch, "outputs", None)  # once per config and launch: several readers
    done = memo.get(id(config)) if memo is not None else None
    if isinstance(done, Exception):
        raise done
    if done is not None:
        return dict(done)
    kw = {**launch.rule_args, **_all_kwargs(config)}
    try:
        for name, rule in launch.rules:
            kw[name] = rule(kw)
    except Exception as exc:
        if memo is not None:
            memo[id(config)] = exc
        raise
    if memo is not None:
        memo[id(config)] = kw
    return dict(kw)


def _all_kwargs(config: Any) -> dict[str, Any]:
    all_kwargs = getattr(config, "all_kwargs", None)
    if callable(all_kwargs):
        return dict(all_kwargs())
    return {**dict(config.kwargs), "num_warps": config.num_warps,
            "num_stages": config.num_stages}


def launch_options(config: Any) -> dict[str, Any]:
    """A config's Triton launch options besides num_warps / num_stages that are not at their
    neutral value (``num_ctas=2``, ``maxnreg=128``)."""
    return {k: getattr(config, k) for k, neutral in LAUNCH_OPTION_DEFAULTS.items()
            if getattr(config, k, neutral) != neutral}


def config_key(config: Any) -> str:
    """Canonical key of a triton.Config (or costtune Config): ``Config.key`` plus the launch
    options it sets (so configs varying only num_ctas or maxnreg differ)."""
    from costtune.types import Config

    values = {**{k: unwrapped(v) for k, v in config.kwargs.items()}, **launch_options(config),
              "num_warps": config.num_warps, "num_stages": config.num_stages}
    return Config.from_dict(values).key
