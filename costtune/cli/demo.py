"""`costtune demo`: the pruning hook on a kernel it never saw, on a CPU, then the leaderboard.

The matmul of Triton's tutorial 03 (``costtune.cli.demo_kernel``: BLOCK_SIZE_M/N/K,
GROUP_SIZE_M, 384 configs) is decorated with ``costtune.autotune``. For each shape the command
does what Triton's ``Autotuner.run`` does on a first call up to the benchmark: it records the
named args and calls ``prune_configs`` with the launch's kwargs (``grid``, ``warmup``), where
costtune's ``early_config_prune`` ranks every config with the shipped model. The tensors live on
torch's ``meta`` device and nothing compiles or runs, so no GPU is needed (and none is used).

It prints what the pruner kept and why (rank, predicted score, the ``PruneDecision``: family,
problem, fallbacks, milliseconds, any ``CosttuneWarning``), beside each kept config how fast the
H200 dataset measured it for that shape (or which constraint of the family's space kept it out
of the measurements), where the fastest measured config ranked, then what `costtune eval`
prints.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import typer

# A test-suite square (never trained on) and a Mistral-7B decode projection (16 tokens).
DEFAULT_SHAPES = ["5120,5120,5120", "16,28672,4096"]


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(dataset: Path = typer.Option(Path("datasets/h200"), help="store root (the "
                                          "shipped H200 dataset)"),
             model: str = typer.Option("h200", help="shipped model name or a model path"),
             top_k: int = typer.Option(8, "--top-k", min=0,
                                        help="configs Triton would benchmark"),
             shape: list[str] = typer.Option(DEFAULT_SHAPES, "--shape",
                                             help="M,N,K of one fp16 matmul (repeatable)")
             ) -> None:
        """Prune a tutorial matmul's 384 configs on a CPU, show why, print the leaderboard."""
        from costtune.cli.console import console, fail
        from costtune.cli.eval import check_dataset, print_leaderboard, scored_rows

        shapes = [parse_shape(s) for s in shape]
        check_dataset(dataset)
        data = scored_rows(dataset, model)  # every input checked before any output
        measured = data[data["kernel"] == "gemm"]
        if measured.empty:
            fail(f"--dataset {dataset} holds no gemm rows: the demo prunes a GEMM")
        import costtune
        from costtune.cli.demo_kernel import matmul_kernel, tutorial_configs

        configs = tutorial_configs()
        tuner = costtune.autotune(configs, key=["M", "N", "K"], top_k=top_k, model=model,
                                  precompile=False)(matmul_kernel)
        console.print(f"Triton tutorial-03 matmul, {len(configs)} configs, under "
                      f"costtune.autotune(top_k={top_k}, model={model!r}), no mapping: the hook "
                      "reads the tutorial's names itself. Each shape is pruned as Triton's "
                      "Autotuner prunes on a first call; nothing compiles or runs.\n")
        for i, problem in enumerate(shapes):
            kept, caught = prune_like_triton(tuner, problem)
            show_decision(console, tuner, kept, caught=caught, measured=measured,
                          first=i == 0)
        console.rule("leaderboard: `costtune eval` (TenSet top-k on the held-out test shapes)")
        print_leaderboard(dataset, model=model, data=data)


def parse_shape(text: str) -> dict[str, int]:
    """``"M,N,K"`` -> ``{"M": .., "N": .., "K": ..}``; BadParameter for anything else."""
    parts = text.split(",")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        sizes = []
    if len(sizes) != 3 or min(sizes) < 1 or max(sizes) > 2**31 - 1:
        raise typer.BadParameter(f"--shape takes M,N,K as three positive integers below "
                                 f"2^31, got {text!r}")
    return dict(zip(("M", "N", "K"), sizes))


def prune_like_triton(tuner: Any, problem: dict[str, int]) -> tuple[list[Any], list[str]]:
    """(configs kept, CosttuneWarning messages) for one fp16 launch of the tutorial matmul:
    ``Autotuner.run``'s steps before benchmarking (triton 3.6), on meta tensors."""
    import torch

    from costtune.cli.demo_kernel import launch
    from costtune.types import CosttuneWarning

    m, n, k = problem["M"], problem["N"], problem["K"]
    a, b, c = (torch.empty(r, s, dtype=torch.float16, device="meta")
               for r, s in ((m, k), (k, n), (m, n)))
    args, grid = launch(a, b, c)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CosttuneWarning)
        tuner.nargs = dict(zip(tuner.arg_names, args))
        try:
            kept = tuner.prune_configs({"grid": grid, "warmup": False})
        finally:
            tuner.nargs = None
    return kept, [str(w.message) for w in caught if issubclass(w.category, CosttuneWarning)]


def measured_speeds(measured: Any, problem: dict[str, int], keys: list[str]
                    ) -> dict[str, float]:
    """Family config key -> the H200's speed for ``problem`` (fp16) relative to the fastest of
    ``keys`` the dataset measured there; empty when the dataset lacks the shape."""
    rows = measured[(measured["M"] == problem["M"]) & (measured["N"] == problem["N"])
                    & (measured["K"] == problem["K"]) & (measured["dtype"] == "float16")
                    & (measured["status"] == "ok")]
    times = rows.groupby("config")["time_ms"].median()
    times = times[times.index.isin(keys)]
    return {} if times.empty else (times.min() / times).to_dict()


def show_decision(console: Any, tuner: Any, kept: list[Any], *, caught: list[str],
                  measured: Any, first: bool) -> None:
    """One shape: the kept configs (rank, score, H200 measurement), the decision, the data."""
    from costtune.cli.demo_kernel import TUTORIAL_PARAMS
    from costtune.kernels import get_family
    from costtune.tune.launch import family_params
    from costtune.types import Config

    d = tuner.early_config_prune.last
    params = family_params("gemm", tuner.configs, rename=TUTORIAL_PARAMS)
    family_keys = [Config.from_dict(p).key for p in params]
    problem = d.problem or {}
    speeds = measured_speeds(measured, problem, family_keys) if problem else {}
    space = get_family("gemm").config_space(problem) if problem else None
    where = {id(c): i for i, c in enumerate(tuner.configs)}
    positions = [where[id(c)] for c in kept]
    rows = []
    for i in positions:
        cfg = tuner.configs[i]
        tile = "x".join(str(cfg.kwargs[p]) for p in ("BLOCK_SIZE_M", "BLOCK_SIZE_N",
                                                      "BLOCK_SIZE_K"))
        key = family_keys[i]
        broken = [] if space is None or key in speeds else space.violated(params[i])
        rows.append((tile, str(cfg.num_warps), str(cfg.num_stages),
                     "-" if d.scores is None else f"{d.scores[i]:.3f}",
                     f"{speeds[key]:.3f}" if key in speeds else "-", ", ".join(broken)))
    title = (f"M={problem.get('M')} N={problem.get('N')} K={problem.get('K')} {d.dtype}: "
             f"kept {len(kept)} of {d.n_configs}")
    console.print(_kept_table(title, rows))
    note = " (a first call waits for the model's load)" if first else ""
    console.print(f"  PruneDecision: family={d.family} problem={d.problem} dtype={d.dtype} "
                  f"k={d.k} fallbacks={', '.join(d.fallbacks) or 'none'} stage2={d.stage2} "
                  f"elapsed_ms={d.elapsed_ms:.1f}{note}")
    for message in caught:
        console.print(f"  CosttuneWarning: {message}")
    console.print("  " + _data_summary(tuner, d, speeds, family_keys, positions) + "\n")


def _kept_table(title: str, rows: list[tuple[str, ...]]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, caption="H200: the dataset's time for "
                  "the fastest measured of the 384 / this config's; '-' where not measured, "
                  "with the constraints of the family's space it breaks")
    for name in ("rank", "tile MxNxK", "warps", "stages", "score", "H200"):
        table.add_column(name, justify="right")
    table.add_column("outside the measured space")
    for rank, row in enumerate(rows, 1):
        table.add_row(str(rank), *row)
    return table


def _data_summary(tuner: Any, d: Any, speeds: dict[str, float], family_keys: list[str],
                  positions: list[int]) -> str:
    """What the H200 dataset says about this pruning: where its fastest config ranked."""
    from costtune.evaluate.metrics import rank_positions
    from costtune.tune.decision import tie_keys

    if not speeds or d.scores is None:
        return "H200 dataset: this shape was not measured."
    order = rank_positions(d.scores, tie_keys(tuner.configs))  # as the hook ranks
    best = next(r for r, i in enumerate(order, 1) if speeds.get(family_keys[i]) == 1.0)
    kept = [speeds[family_keys[i]] for i in positions if family_keys[i] in speeds]
    head = f"H200 dataset: {len(speeds)} of the {len(tuner.configs)} configs were measured " \
           f"for this shape; their fastest is the model's #{best}"
    if kept:
        return f"{head}, and the best kept one runs at {max(kept):.3f} of its speed."
    return f"{head}, and none of the kept ones was measured (see the last column)."
