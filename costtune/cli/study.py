"""`costtune study`: an Optuna search over one workload's config space, on the GPU or by replay.

    costtune study gemm --shape 4096,4096,4096 --replay datasets/h200 --sampler tpe \\
        --n-trials 16 --warm-start h200 --json
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import typer

from costtune.cli.console import bar, describe
from costtune.env import gpu_problem

KERNELS = ("gemm", "softmax", "attention")


def register(app: typer.Typer) -> None:
    """Add ``study`` to the ``costtune`` app."""
    app.command("study")(study)


def _fail(message: str) -> None:
    from costtune.cli.console import fail

    fail(message)


def parse_shape(keys: tuple[str, ...], text: str) -> dict[str, Any]:
    """``"4096,4096,4096"`` -> ``{"M": 4096, ...}`` in ``keys`` order; ValueError when the count
    or a value is wrong (``causal`` takes 0/1/true/false).

    >>> parse_shape(("rows", "cols"), "8,1000")
    {'rows': 8, 'cols': 1000}
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) != len(keys):
        raise ValueError(f"--shape needs {len(keys)} comma-separated sizes ({','.join(keys)}), "
                         f"got {len(parts)}: {text!r}")
    out: dict[str, Any] = {}
    for key, part in zip(keys, parts):
        if key == "causal":
            flags = {"0": False, "1": True, "false": False, "true": True}
            if part.lower() not in flags:
                raise ValueError(f"causal must be 0/1/true/false, got {part!r}")
            out[key] = flags[part.lower()]
            continue
        try:
            out[key] = int(part)
        except ValueError:
            raise ValueError(f"size {key} must be an integer, got {part!r}") from None
        if out[key] < 1:
            raise ValueError(f"size {key} must be >= 1, got {part}")
    return out


def _clean(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def study(kernel: str = typer.Argument(..., help="gemm | softmax | attention"),
          shape: str = typer.Option(..., "--shape", help="problem sizes in the family's "
                                    "PROBLEM_KEYS order, comma-separated (gemm: M,N,K)"),
          dtype: str = typer.Option("float16", "--dtype", help="input dtype (torch name)"),
          replay: Path | None = typer.Option(None, "--replay", help="recorded dataset: "
                                             "answer from it on CPU instead of a GPU"),
          gpu: str | None = typer.Option(None, "--gpu", help="with --replay: the GPU model "
                                         "whose rows to replay (e.g. 'NVIDIA H200'), needed "
                                         "where the dataset holds the workload from several"),
          sampler: str = typer.Option("tpe", "--sampler", help="tpe|cmaes|gp|random|qmc"),
          n_trials: int = typer.Option(32, "--n-trials", help="configs to measure"),
          storage: str | None = typer.Option(None, "--storage", help="Optuna storage URL or "
                                             "SQLite file (default: in memory); several "
                                             "processes may share one"),
          study_name: str | None = typer.Option(None, "--study-name",
                                                help="resume this study when it exists"),
          warm_start: str | None = typer.Option(None, "--warm-start", help="cost model name "
                                                "or path: enqueue its top configs first"),
          n_warm: int = typer.Option(8, "--n-warm", help="configs the warm start enqueues"),
          seed: int | None = typer.Option(None, "--seed"),
          heartbeat: int = typer.Option(2, "--heartbeat", help="seconds between a shared "
                                        "study's trial heartbeats; a trial without one for 5x "
                                        "that counts as its worker's death (0: no heartbeat)"),
          json_out: bool = typer.Option(False, "--json", help="print a JSON summary")) -> None:
    """Search one workload's config space with an Optuna study (GPU, or --replay on CPU)."""
    from costtune.search.samplers import SAMPLERS

    if kernel not in KERNELS:
        _fail(f"unknown kernel {kernel!r}; use one of {', '.join(KERNELS)}")
    if sampler not in SAMPLERS:
        _fail(f"unknown sampler {sampler!r}; use one of {', '.join(SAMPLERS)}")
    if n_trials < 1 or n_warm < 0 or heartbeat < 0:
        _fail(f"--n-trials must be >= 1, --n-warm and --heartbeat >= 0, got {n_trials}, "
              f"{n_warm}, {heartbeat}")
    from costtune.kernels import get_family
    from costtune.types import Workload

    family = get_family(kernel)
    try:
        problem = parse_shape(tuple(family.PROBLEM_KEYS), shape)
    except ValueError as exc:
        _fail(str(exc))
    if dtype not in family.DTYPES:
        _fail(f"{kernel} takes dtype {', '.join(family.DTYPES)}, not {dtype!r}")
    workload = Workload(kernel, problem, dtype)
    if gpu is not None and replay is None:
        _fail("--gpu chooses a GPU model's rows in a --replay dataset; pass --replay DIR")
    _check_storage(storage)
    model = _warm_model(warm_start, kernel)
    runner = _runner(workload, replay, seed, gpu)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    from costtune.search.study import ConfigStudy

    try:
        search = ConfigStudy(workload, runner, sampler=sampler, seed=seed, storage=storage,
                             study_name=study_name, warm_start=model, n_warm=n_warm,
                             heartbeat_s=heartbeat or None, grace_s=5 * heartbeat or None)
    except ValueError as exc:
        _fail(describe(exc))
    with bar(f"{workload.id}: trials measured", n_trials) as advance:
        result = search.optimize(n_trials, progress=lambda r: advance(
            int(not r.cached and r.status != "invalid")))
    out: dict[str, Any] = {"kernel": kernel, "workload": workload.id, "sampler": sampler,
                           **result.as_dict(),
                           "trials_in_study": len(search.study.trials),
                           "storage": storage or "memory"}
    _report(out, result, runner.best(workload) if replay is not None else None, json_out)


def _report(out: dict[str, Any], result: Any, exhaustive: Any, json_out: bool) -> None:
    """Print the study's summary (one JSON line with ``--json``); ``exhaustive``: the replay's
    best measurement, None on a GPU."""
    if exhaustive is not None:
        out["exhaustive_best_config"] = exhaustive.config.as_dict()
        out["exhaustive_best_time_ms"] = exhaustive.time_ms
        out["ratio"] = (exhaustive.time_ms / result.best_time_ms
                        if math.isfinite(result.best_time_ms) else 0.0)
    out = {k: _clean(v) for k, v in out.items()}
    if json_out:
        typer.echo(json.dumps(out))
        return
    typer.echo(f"{out['workload']}: best {out['best_config_key']} at {out['best_time_ms']} ms "
               f"after {result.n_measured} measured trials ({result.n_proposals} proposals, "
               f"study {result.study_name!r}: {out['trials_in_study']} trials)")
    if exhaustive is not None:
        typer.echo(f"exhaustive best {out['exhaustive_best_time_ms']} ms; best found reaches "
                   f"{out['ratio']:.3f} of it")


def _check_storage(storage: str | None) -> None:
    """The storage's kind is known and a SQLite file's folder exists (before any dataset or
    GPU work)."""
    if storage is None:
        return
    from costtune.search.shared import check_storage

    try:
        check_storage(storage)
    except ValueError as exc:
        _fail(f"--{exc}")


def _warm_model(warm_start: str | None, kernel: str) -> Any:
    if warm_start is None:
        return None
    from costtune.model.registry import load_model

    try:
        return load_model(warm_start, kernel)
    except (OSError, ValueError) as exc:
        _fail(f"--warm-start {warm_start}: {describe(exc)}")


def _runner(workload: Any, replay: Path | None, seed: int | None, gpu: str | None) -> Any:
    if replay is not None:
        from costtune.cli.inputs import load_rows
        from costtune.measure.replay import ReplayRunner

        rows = load_rows(replay, kernel=workload.kernel, option="--replay")
        try:
            runner = ReplayRunner(rows, gpu=gpu)
            runner.best(workload)  # the ratio needs one OK row; a study could find nothing
        except (OSError, ValueError) as exc:
            _fail(f"--replay {replay}: {describe(exc)}")
        return runner
    problem = gpu_problem()
    if problem is not None:
        _fail(f"a study without --replay measures on a CUDA GPU and {problem}; pass "
              "--replay DIR to search a recorded dataset on CPU")
    from costtune.measure.gpu import GpuRunner

    return GpuRunner(seed=seed or 0)
