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
from dataclasses import dataclass
from typing import Any

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
    found nowhere; ``knobs``: config names of ``KNOWN_KNOBS``; ``unknown``: the rest."""

    family: str
    rename: dict[str, str]
    meta: dict[str, Any]
    origin: dict[str, str]
    missing: tuple[str, ...]
    knobs: tuple[str, ...]
    unknown: tuple[str, ...]

    def foreign_tiles(self) -> list[str]:
        """Unknown config names that are another family's tile parameters."""
        return [n for n in self.unknown if n in _ANY_TILE]


def map_params(family: str, config_names: Iterable[str], args: Mapping[str, Any], *,
               user: Mapping[str, str], constants: Mapping[str, int] | None = None
               ) -> ParamMap:
    """How the configs' names, the launch's integer kwargs and the kernel's own integer
    constexprs (``constants``) give ``family``'s parameters; ``user`` (``params=``) wins over
    the known spellings."""
    constants = constants or {}
    names = list(dict.fromkeys(config_names))
    required, neutral = FAMILY_PARAMS[family]
    rename: dict[str, str] = {}
    meta: dict[str, Any] = {}
    origin: dict[str, str] = {}
    missing = []
    for param in (*required, *neutral):
        spellings = [u for u, f in user.items() if f == param]
        spellings += [n for n in PARAM_NAMES[family].get(param, ()) if n not in user]
        in_config = next((n for n in spellings if n in names and n not in rename), None)
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
    rest = [n for n in names if n not in rename]
    knobs = tuple(n for n in rest if n in KNOWN_KNOBS or n in LAUNCH_OPTION_DEFAULTS)
    unknown = tuple(n for n in rest if n not in knobs)
    return ParamMap(family, rename, meta, origin, tuple(missing), knobs, unknown)


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
                  meta: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Per config: the family's parameters (renamed; else fixed at the launch, ``meta``; else
    their neutral value) plus num_warps and num_stages. Names the family does not know are
    left out."""
    required, neutral = FAMILY_PARAMS[family]
    meta = dict(meta or {})
    out = []
    for c in configs:
        kw = {rename.get(k, k): v for k, v in c.kwargs.items()}
        missing = [p for p in required if p not in kw and p not in meta]
        if missing:
            raise NotApplicable("params", f"config {dict(c.kwargs)} lacks {family} "
                                f"parameter(s) {missing}; map yours with "
                                f"{mapping_hint(family, c.kwargs, missing)}")
        d = {p: kw.get(p, meta.get(p)) for p in required}
        d.update((p, kw.get(p, meta.get(p, v))) for p, v in neutral.items())
        d["num_warps"], d["num_stages"] = c.num_warps, c.num_stages
        out.append(d)
    return out


def launch_options(config: Any) -> dict[str, Any]:
    """A config's Triton launch options besides num_warps / num_stages that are not at their
    neutral value (``num_ctas=2``, ``maxnreg=128``)."""
    return {k: getattr(config, k) for k, neutral in LAUNCH_OPTION_DEFAULTS.items()
            if getattr(config, k, neutral) != neutral}


def config_key(config: Any) -> str:
    """Canonical key of a triton.Config (or costtune Config): ``Config.key`` plus the launch
    options it sets (so configs varying only num_ctas or maxnreg differ)."""
    from costtune.types import Config

    values = {**dict(config.kwargs), **launch_options(config),
              "num_warps": config.num_warps, "num_stages": config.num_stages}
    return Config.from_dict(values).key
