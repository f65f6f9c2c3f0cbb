"""Declarative config spaces: named value lists, constraints, enumeration, sampling, neighbours."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from costtune.types import Config

# Shared memory a Hopper (sm_90) block may use: 227 KiB.

Constraint = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class NamedConstraint:
    name: str
    check: Constraint


class ConfigSpace:
    """A grid of named parameters, filtered by constraint predicates over a flat config dict.

    ``num_warps`` and ``num_stages`` are ordinary parameters here; every other name becomes a
    ``triton.Config`` kwarg.

    >>> space = ConfigSpace({"BLOCK": [32, 64, 128], "num_warps": [4, 8], "num_stages": [2]},
    ...                     constraints={"small": lambda c: c["BLOCK"] * c["num_warps"] <= 512})
    >>> len(space)
    5
    >>> space.neighbors(space.configs()[0])[0].key
    'BLOCK=64,num_warps=4,num_stages=2'
    """

    def __init__(self, params: dict[str, Sequence[Any]], *,
                 constraints: dict[str, Constraint] | None = None) -> None:
        if not params:
            raise ValueError("ConfigSpace needs at least one parameter")
        for name, values in params.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"parameter names must be non-empty strings, got {name!r}")
            if len(values) == 0:
                raise ValueError(f"parameter {name!r} has no values")
            if len(set(values)) != len(values):
                raise ValueError(f"parameter {name!r} has repeated values: {list(values)}")
        self.params: dict[str, tuple[Any, ...]] = {k: tuple(v) for k, v in params.items()}
        self.constraints = [NamedConstraint(k, f) for k, f in (constraints or {}).items()]
        self._configs: list[Config] | None = None

    @property
    def names(self) -> list[str]:
        return list(self.params)

    def is_valid(self, values: dict[str, Any]) -> bool:
        """True when ``values`` names exactly this space's parameters, on its grid, and passes
        every constraint. Unknown or missing names raise ValueError."""
        self._check_names(values)
        if any(values[k] not in v for k, v in self.params.items()):
            return False
        return all(c.check(values) for c in self.constraints)

    def violated(self, values: dict[str, Any]) -> list[str]:
        """Names of the constraints ``values`` breaks (for error messages and failure rows)."""
        self._check_names(values)
        return [c.name for c in self.constraints if not c.check(values)]

    def configs(self) -> list[Config]:
        """Every valid config, in deterministic grid order (first parameter varies slowest)."""
        if self._configs is None:
            out = []
            for combo in itertools.product(*self.params.values()):
                values = dict(zip(self.params, combo))
                if all(c.check(values) for c in self.constraints):
                    out.append(self._to_config(values))
            if not out:
                raise ValueError("config space is empty: every combination breaks a constraint "
                                 f"({', '.join(c.name for c in self.constraints)})")
            self._configs = out
        return list(self._configs)

    def __iter__(self) -> Iterator[Config]:
        return iter(self.configs())

    def __len__(self) -> int:
        return len(self.configs())

    def __contains__(self, config: Config | dict) -> bool:
        values = config.as_dict() if isinstance(config, Config) else dict(config)
        try:
            return self.is_valid(values)
        except ValueError:
            return False

    def sample(self, n: int, *, seed: int = 0) -> list[Config]:
        """``n`` distinct valid configs (all of them when ``n`` >= len), reproducible by seed."""
        configs = self.configs()
        if n >= len(configs):
            return configs
        return random.Random(seed).sample(configs, n)

    def neighbors(self, config: Config | dict) -> list[Config]:
        """Valid configs that differ from ``config`` in one parameter by one grid step."""
        values = config.as_dict() if isinstance(config, Config) else dict(config)
        self._check_names(values)
        out = []
        for name, grid in self.params.items():
            if values[name] not in grid:
                raise ValueError(f"{name}={values[name]!r} is not on the grid {list(grid)}")
            i = grid.index(values[name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(grid):
                    cand = {**values, name: grid[j]}
                    if all(c.check(cand) for c in self.constraints):
                        out.append(self._to_config(cand))
        return out

    def to_triton(self) -> list:
        return [c.to_triton() for c in self.configs()]

    def from_triton(self, configs: Sequence[Any]) -> list[Config]:
        """Convert ``triton.Config`` objects, checking each against this space."""
        out = []
        for tc in configs:
            c = Config.from_triton(tc)
            bad = self.violated(c.as_dict())
            if bad:
                raise ValueError(f"config {c.key} breaks constraints: {', '.join(bad)}")
            out.append(c)
        return out

    def _check_names(self, values: dict[str, Any]) -> None:
        unknown = sorted(set(values) - set(self.params))
        missing = sorted(set(self.params) - set(values))
        if unknown:
            raise ValueError(f"unknown parameter(s) {unknown}; this space has {self.names}")
        if missing:
            raise ValueError(f"missing parameter(s) {missing}; this space has {self.names}")

    def _to_config(self, values: dict[str, Any]) -> Config:
        # Launch options go last so Config.key reads the same for every space.
        return Config.from_dict(values)

    def __repr__(self) -> str:
        grid = ", ".join(f"{k}={list(v)}" for k, v in self.params.items())
        return f"ConfigSpace({grid}; {len(self.constraints)} constraints)"
