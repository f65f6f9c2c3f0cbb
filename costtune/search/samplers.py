"""Samplers for ``costtune.search.study``: Optuna's five by name, and a sampler that uses the
cost model.

Every parameter of a ``ConfigSpace`` is suggested as an int index into its value list (the values
some valid config uses, in the space's order: tile sizes ascending), so TPE, CMA-ES, GP, random
and QMC all search the same ordinal space and neighbouring indices mean neighbouring tiles.

The model prior: ``ModelPriorSampler`` draws each of the study's first ``n_prior`` trials from
the model's ranking of the valid configs, ``p(config) ~ exp(-rank / temperature)`` over the
configs the study has not tried yet, then hands every later trial to a base sampler (TPE by
default). Ranks, not raw scores, set the weights: a ``rank:pairwise`` model's margins have no
fixed scale, ranks do, so one temperature means the same thing for every model and workload
(``temperature=4``: the top remaining config is e^1 = 2.7x likelier than the 5th). It is the
soft version of the deterministic warm start (``warm_start=model`` enqueues the top ``n_warm``).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

SAMPLERS = ("tpe", "cmaes", "gp", "random", "qmc")
CONSTRAINT_SAMPLERS = ("tpe", "gp")  # the ones that read constraints of infeasible trials
# Optuna >= 5 reads constraints that the objective sets on the trial; older versions need a
# constraints_func on the samplers that support it (TPE, GP).
HAS_TRIAL_CONSTRAINTS = hasattr(optuna.trial.Trial, "set_constraint")
CONSTRAINTS_ATTR = "constraints"


def _classes() -> dict[str, type[BaseSampler]]:
    s = optuna.samplers
    return {"tpe": s.TPESampler, "cmaes": s.CmaEsSampler, "gp": s.GPSampler,
            "random": s.RandomSampler, "qmc": s.QMCSampler}


def constraints_from_attrs(trial: FrozenTrial) -> Sequence[float]:
    """``constraints_func`` for Optuna < 5: the values the study stored as a user attr."""
    return list(trial.user_attrs.get(CONSTRAINTS_ATTR, [0.0]))


def mark_infeasible(trial: optuna.Trial, violated: Sequence[str]) -> None:
    """Record the violated constraints on the trial, as the Optuna version in use reads them."""
    if HAS_TRIAL_CONSTRAINTS:
        for name in violated:
            trial.set_constraint(name, 1.0)
    else:
        trial.set_user_attr(CONSTRAINTS_ATTR, [1.0] * len(violated))


def make_sampler(name: str, *, seed: int | None = None, n_startup_trials: int | None = None,
                 options: dict[str, Any] | None = None) -> BaseSampler:
    """An Optuna sampler by name (``SAMPLERS``), with ``options`` passed to its constructor.

    CMA-ES is Optuna's default on the index space (values rounded; ``options={"with_margin":
    True}`` gives CMAwM, ~4x slower per proposal here); QMC is scrambled so seeds differ.
    Unknown names or options raise ValueError.

    >>> type(make_sampler("tpe", seed=0)).__name__
    'TPESampler'
    """
    classes = _classes()
    if name not in classes:
        raise ValueError(f"unknown sampler {name!r}; use one of {list(SAMPLERS)}")
    cls = classes[name]
    accepted = set(inspect.signature(cls).parameters)
    kwargs: dict[str, Any] = {"seed": seed}
    if name == "cmaes":
        kwargs.update(warn_independent_sampling=False)
    elif name == "qmc":
        kwargs.update(scramble=True, warn_independent_sampling=False,
                      warn_asynchronous_seeding=False)
    if n_startup_trials is not None and "n_startup_trials" in accepted and name != "cmaes":
        kwargs["n_startup_trials"] = int(n_startup_trials)
    if not HAS_TRIAL_CONSTRAINTS and "constraints_func" in accepted:
        kwargs["constraints_func"] = constraints_from_attrs
    unknown = sorted(set(options or {}) - accepted)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for sampler {name!r}; "
                         f"it takes {sorted(accepted)}")
    kwargs.update(options or {})
    return cls(**kwargs)


class ModelPriorSampler(BaseSampler):
    """Trials ``0 .. n_prior-1`` come from the model's ranking, the rest from ``base``.

    ``ranked``: the space's valid configs as index params, best-predicted first; ``distributions``:
    the study's index distributions. A trial draws among the configs no trial of the study holds
    yet with ``p ~ exp(-rank / temperature)`` (``temperature -> 0``: the plain top-k order).

    >>> from optuna.distributions import IntDistribution
    >>> s = ModelPriorSampler(optuna.samplers.RandomSampler(seed=0), ranked=[{"x": 2}, {"x": 0}],
    ...                       distributions={"x": IntDistribution(0, 2)}, n_prior=2, seed=0)
    >>> study = optuna.create_study(sampler=s)
    >>> [study.ask().suggest_int("x", 0, 2) for _ in range(2)]
    [2, 0]
    """

    def __init__(self, base: BaseSampler, *, ranked: Sequence[dict[str, int]],
                 distributions: dict[str, BaseDistribution], n_prior: int = 16,
                 temperature: float = 4.0, seed: int | None = None) -> None:
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if n_prior < 0:
            raise ValueError(f"n_prior must be >= 0, got {n_prior}")
        self.base = base
        self.ranked = [dict(p) for p in ranked]
        self.distributions = dict(distributions)
        self.n_prior = int(n_prior)
        self.temperature = float(temperature)
        self._rng = np.random.RandomState(seed)

    def in_prior(self, number: int) -> bool:
        return number < self.n_prior and bool(self.ranked)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        if self.in_prior(trial.number):
            return dict(self.distributions)
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not self.in_prior(trial.number):
            return self.base.sample_relative(study, trial, search_space)
        names = sorted(self.distributions)
        held = set()
        for t in study.get_trials(deepcopy=False):
            if t.number != trial.number:
                params = t.system_attrs.get("fixed_params", t.params)
                held.add(tuple(params.get(n) for n in names))
        free = [(r, p) for r, p in enumerate(self.ranked)
                if tuple(p.get(n) for n in names) not in held]
        if not free:
            return {}
        ranks = np.array([r for r, _ in free], dtype=float)
        if self.temperature == 0:
            return dict(free[0][1])
        weights = np.exp(-(ranks - ranks[0]) / self.temperature)
        pick = self._rng.choice(len(free), p=weights / weights.sum())
        return dict(free[pick][1])

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._rng.seed()
        self.base.reseed_rng()

