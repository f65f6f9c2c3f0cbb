"""Show a leaderboard: a top-k-vs-k plot per kernel and a rich table.

Both take the ``{kernel: {name: {"top1": ..., "worst8": ...}}}`` dict ``leaderboard`` returns
(or ``evaluate(...)["scores"]``).
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

Board = dict[str, dict[str, dict[str, float]]]
_TOP = re.compile(r"^top(\d+)$")


def _ks(metrics: dict[str, float]) -> list[int]:
    return sorted(int(m.group(1)) for m in map(_TOP.match, metrics) if m)


def plot_topk(result: Board, path: str | os.PathLike) -> Path:
    """Save a PNG of top-k score vs k (log2 axis), one panel per kernel, one line per name.

    >>> import tempfile, os
    >>> board = {"gemm": {"costtune": {"top1": 0.8, "top2": 0.9, "worst8": 0.7}}}
    >>> plot_topk(board, os.path.join(tempfile.mkdtemp(), "topk.png")).exists()
    True
    """
    kernels = sorted(result)
    fig, axes = kernel_panels(kernels)
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(n for k in kernels for n in result[k]))
    # One colour per name across panels (the default cycle restarts per panel).
    palette = plt.get_cmap("tab10").colors
    colors = {n: "black" if n == "costtune" else palette[i % len(palette)]
              for i, n in enumerate(n for n in names if n != "costtune")}
    colors["costtune"] = "black"
    handles = {}
    for ax, kernel in zip(axes, kernels, strict=False):
        for name, metrics in result[kernel].items():
            ks = _ks(metrics)
            (line,) = ax.plot(ks, [metrics[f"top{k}"] for k in ks], marker="o", label=name,
                              color=colors[name], linewidth=2.6 if name == "costtune" else 1.4)
            handles.setdefault(name, line)
        topk_panel(ax, kernel, "k (configs measured)")
    axes[0].set_ylabel("top-k score  (sum L* / sum L(k))")
    return save_panels(fig, path, [handles[n] for n in names], names,
                       ncol=min(4, max(1, len(names))), bottom=0.08 + 0.04 * (len(names) // 5))


def kernel_panels(kernels: list[str]) -> tuple[Any, Any]:
    """A figure with one panel per kernel in a row, sharing the y axis (matplotlib's file
    backend): (figure, panels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(1, len(kernels))
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, 3.8), squeeze=False, sharey=True)
    return fig, axes[0]


def topk_panel(ax: Any, title: str, xlabel: str) -> None:
    """A top-k score panel: log2 x axis, scores from 0 to 1, a light grid."""
    ax.set_xscale("log", base=2)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)


def save_panels(fig: Any, path: str | os.PathLike, handles: list, labels: list[str], *,
                ncol: int, bottom: float) -> Path:
    """One legend under the panels, then the PNG at ``path`` (its folder made)."""
    import matplotlib.pyplot as plt

    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def leaderboard_table(result: Board, *, title: str = "top-k score (TenSet)") -> Any:
    """A ``rich.table.Table``: one row per (kernel, name), the best value per kernel in bold."""
    from rich.table import Table

    columns: list[str] = []
    for board in result.values():
        for metrics in board.values():
            columns += [c for c in metrics if c not in columns]
    table = Table(title=title)
    table.add_column("kernel")
    table.add_column("name")
    for c in columns:
        table.add_column(c, justify="right")
    for kernel in sorted(result):
        board = result[kernel]
        best = {c: max((m.get(c, float("nan")) for m in board.values()
                        if m.get(c) == m.get(c)), default=None) for c in columns}
        for i, (name, metrics) in enumerate(board.items()):
            cells = []
            for c in columns:
                v = metrics.get(c, float("nan"))
                text = "-" if v != v else f"{v:.3f}"
                cells.append(f"[bold]{text}[/bold]" if best[c] is not None and v == best[c]
                             else text)
            table.add_row(kernel if i == 0 else "", name, *cells,
                          end_section=i == len(board) - 1)
    return table


def format_leaderboard(result: Board, *, width: int = 120) -> str:
    """The leaderboard table rendered as plain text.

    >>> "0.800" in format_leaderboard({"gemm": {"costtune": {"top1": 0.8}}})
    True
    """
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(leaderboard_table(result))
    return console.export_text()
