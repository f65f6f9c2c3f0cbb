"""Planning a collection: suites -> workloads -> the configs each still needs (resume), and
the order to hand them to several GPUs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from costtune.kernels import FLAG_KEYS, get_implementation
from costtune.types import Config, Workload


def suite_problems(kernel: str, suite: str) -> list[dict[str, Any]]:
    """Problems of a named suite ("train", "test") or of a JSON file holding a list of dicts.
    ``kernel``: a family or an implementation (``costtune.kernels.IMPLEMENTATIONS``), whose
    suites are the family's shapes it supports."""
    family = get_implementation(kernel)
    if suite in ("train", "test"):
        return [dict(p) for p in (family.TRAIN_SHAPES if suite == "train" else family.TEST_SHAPES)]
    path = Path(suite)
    if not path.is_file():
        raise ValueError(f"--suite must be 'train', 'test' or a JSON file; {suite!r} is neither")
    try:
        problems = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(problems, list) or not all(isinstance(p, dict) for p in problems):
        raise ValueError(f"{path}: expected a JSON list of problem dicts")
    for p in problems:
        missing = set(family.PROBLEM_KEYS) - set(p)
        if missing:
            raise ValueError(f"{path}: problem {p} lacks {sorted(missing)}")
        bad = [k for k in family.PROBLEM_KEYS if k not in FLAG_KEYS and (
            isinstance(p[k], bool) or not isinstance(p[k], int) or p[k] < 0)]
        if bad:
            raise ValueError(f"{path}: problem {p}: {bad[0]} must be a whole number >= 0")
    return problems


def bf16_subset(kernel: str, problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shapes also measured in bf16: the family's BF16_SUBSET, else every 4th shape."""
    subset = getattr(get_implementation(kernel), "BF16_SUBSET", None)
    if subset is not None:
        keys = {tuple(sorted(p.items())) for p in subset}
        return [p for p in problems if tuple(sorted(p.items())) in keys]
    return problems[::4]


def suite_workloads(kernel: str, suite: str, dtypes: Iterable[str] | None = None
                    ) -> list[Workload]:
    """Workloads of a suite. ``dtypes=None`` means fp16 for every shape and bf16 on a subset."""
    family = get_implementation(kernel)
    problems = suite_problems(kernel, suite)
    if dtypes is None:
        pairs = [(p, "float16") for p in problems]
        pairs += [(p, "bfloat16") for p in bf16_subset(kernel, problems)]
    else:
        dtypes = list(dtypes)
        bad = [d for d in dtypes if d not in family.DTYPES]
        if bad:
            raise ValueError(f"dtype(s) {bad} not supported by {kernel}; use {family.DTYPES}")
        pairs = [(p, d) for d in dtypes for p in problems]
    return [Workload(kernel, {k: p[k] for k in family.PROBLEM_KEYS}, d) for p, d in pairs]


def workload_configs(workload: Workload, *, max_configs: int | None = None,
                     seed: int = 0) -> list[Config]:
    space = get_implementation(workload.implementation).config_space(workload.sizes)
    return space.sample(max_configs, seed=seed) if max_configs else space.configs()


def plan_workloads(workloads: list[Workload], store, *, max_configs: int | None = None,
                   seed: int = 0, gpu: str | None = None
                   ) -> tuple[list[tuple[Workload, list[Config]]], int]:
    """(workload, configs not yet stored for GPU model ``gpu``) for each workload with work
    left, and how many had none (resume). ``gpu=None``: stored on any GPU counts. Duplicate
    workloads count once."""
    unique = list(dict.fromkeys(workloads))
    kernel_done: dict[str, set] = {}
    todo = []
    for w in unique:
        done = kernel_done.setdefault(w.kernel, store.measured_keys(w.kernel, gpu=gpu))
        configs = [c for c in workload_configs(w, max_configs=max_configs, seed=seed)
                   if (w.id, c.key) not in done]
        if configs:
            todo.append((w, configs))
    return todo, len(unique) - len(todo)


def still_needed(store, workload: Workload, configs: list[Config], *,
                 gpu: str | None) -> list[Config]:
    """``configs`` not stored yet, read again now (another collector may have stored some
    since the plan was made)."""
    done = store.measured_keys(workload.kernel, gpu=gpu)
    return [c for c in configs if (workload.id, c.key) not in done]


def spread_order(todo: list[tuple[Workload, list[Config]]]
                 ) -> list[tuple[Workload, list[Config]]]:
    """The order to hand workloads to several GPUs: biggest first within each (kernel, dtype),
    taking from the groups in turn. Workloads of one group share compiled kernels (same
    implementation, same specialization, overlapping configs); two GPUs measuring neighbours of one
    group at once would both compile the kernels neither has cached yet."""
    groups: dict[tuple[str, str], list] = {}
    for item in sorted(todo, key=lambda wc: -len(wc[1])):
        groups.setdefault((item[0].implementation, item[0].dtype), []).append(item)
    queues = list(groups.values())
    out = []
    while queues:
        out += [q.pop(0) for q in queues]
        queues = [q for q in queues if q]
    return out
