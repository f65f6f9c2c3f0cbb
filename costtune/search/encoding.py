"""Index encoding of a ``ConfigSpace`` for Optuna samplers, and the nearest valid config to a
proposal (the study's repair move when a sampler is stuck)."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import numpy as np
from optuna.distributions import IntDistribution
from optuna.trial import Trial

from costtune.space.config_space import ConfigSpace
from costtune.types import Config


class SpaceEncoding:
    """A ``ConfigSpace`` as Optuna int distributions: one index per parameter into the values
    that some valid config uses (space order); a parameter with one such value is fixed.

    >>> space = ConfigSpace({"BLOCK": [16, 32, 64], "num_warps": [4, 8], "num_stages": [2]},
    ...                     constraints={"small": lambda c: c["BLOCK"] <= 32})
    >>> enc = SpaceEncoding(space)
    >>> enc.values, enc.params(space.configs()[-1])
    ({'BLOCK': [16, 32], 'num_warps': [4, 8], 'num_stages': [2]}, {'BLOCK': 1, 'num_warps': 1})
    """

    def __init__(self, space: ConfigSpace) -> None:
        flat = [c.as_dict() for c in space.configs()]
        self.values = {name: [v for v in grid if any(c[name] == v for c in flat)]
                       for name, grid in space.params.items()}
        self.free = [name for name, vals in self.values.items() if len(vals) > 1]
        self.configs = space.configs()
        self.keys = [c.key for c in self.configs]
        self._index = np.array([[self.params(c)[n] for n in self.free] for c in self.configs],
                               dtype=np.int64).reshape(len(self.configs), len(self.free))

    def distributions(self) -> dict[str, IntDistribution]:
        return {n: IntDistribution(0, len(self.values[n]) - 1) for n in self.free}

    def suggest(self, trial: Trial) -> dict[str, Any]:
        """The flat config values the trial's sampler picks."""
        return {n: vals[trial.suggest_int(n, 0, len(vals) - 1)] if len(vals) > 1 else vals[0]
                for n, vals in self.values.items()}

    def params(self, config: Config) -> dict[str, int]:
        """Index params of ``config`` (for ``enqueue_trial``)."""
        values = config.as_dict()
        return {n: self.values[n].index(values[n]) for n in self.free}

    def nearest(self, values: dict[str, Any], *, exclude: Container[str],
                rng: np.random.Generator) -> Config | None:
        """The valid config closest to ``values`` (L1 over parameter indices) whose key is not
        in ``exclude``; ties broken by ``rng``; None when every config is excluded."""
        target = np.array([self.values[n].index(values[n]) for n in self.free], dtype=np.int64)
        open_ = np.array([k not in exclude for k in self.keys], dtype=bool)
        if not open_.any():
            return None
        dist = np.abs(self._index - target).sum(axis=1)
        dist = np.where(open_, dist, np.iinfo(np.int64).max)
        return self.configs[int(rng.choice(np.flatnonzero(dist == dist.min())))]
