"""`costtune demo` on CPU: it prunes the tutorial matmul through the public API, names what it
kept, and prints the leaderboard; the tutorial kernel itself computes A @ B."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from typer.testing import CliRunner

import costtune
from costtune.cli import app
from costtune.cli.demo import DEFAULT_SHAPES, parse_shape
from costtune.cli.demo_kernel import (
    TUTORIAL_PARAMS,
    launch,
    matmul,
    matmul_kernel,
    tutorial_configs,
)
from costtune.kernels import FAMILIES

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "h200"


def kept_by_the_hook(shape: dict[str, int]) -> list:
    """What the shipped model keeps, asked directly as Triton's Autotuner asks it."""
    pruner = costtune.prune_configs_by("h200", 8, params=TUTORIAL_PARAMS)["early_config_prune"]
    a, b, c = (torch.empty(r, s, dtype=torch.float16, device="meta")
               for r, s in ((shape["M"], shape["K"]), (shape["K"], shape["N"]),
                            (shape["M"], shape["N"])))
    args, grid = launch(a, b, c)
    return pruner(tutorial_configs(), dict(zip(matmul_kernel.arg_names, args)), grid=grid,
                  warmup=False)


def test_demo_names_the_kept_configs_and_prints_the_leaderboard():
    result = CliRunner().invoke(app, ["demo", "--dataset", str(DATASET)])
    assert result.exit_code == 0, result.output
    out = result.output
    # What the demo says it kept is what the hook keeps (8, or more where a doubt widens k;
    # configs that cannot launch are dropped first and named under the fallbacks).
    assert "fallbacks=" in out
    for text in DEFAULT_SHAPES:
        shape = parse_shape(text)
        kept = kept_by_the_hook(shape)
        assert f"M={shape['M']} N={shape['N']} K={shape['K']} float16: kept {len(kept)} of 384" \
            in out
        for rank, cfg in enumerate(kept, 1):
            tile = "x".join(str(cfg.kwargs[p]) for p in TUTORIAL_PARAMS)
            row = rf"^\s*{rank}\s+{tile}\s+{cfg.num_warps}\s+{cfg.num_stages}\s"
            assert re.search(row, out, re.MULTILINE), (rank, tile, out)
    board = out[out.index("top-k score (TenSet)"):]
    assert all(f"│ {family}" in board for family in FAMILIES)
    assert "costtune" in board and "random" in board


def test_demo_rejects_a_bad_shape():
    result = CliRunner().invoke(app, ["demo", "--dataset", str(DATASET), "--shape", "16,4096"])
    assert result.exit_code == 2
    assert "M,N,K as three positive integers" in result.output


def test_tutorial_kernel_computes_a_matmul():
    torch.manual_seed(0)
    a, b = torch.randn(48, 72).half(), torch.randn(72, 40).half()
    c = matmul(a, b, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=8)
    ref = a.float() @ b.float()
    assert torch.linalg.vector_norm(c.float() - ref) / torch.linalg.vector_norm(ref) < 5e-3


def readme_block(heading: str) -> str:
    """The first python code block under a README heading."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = text[text.index(heading):]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_quick_start_runs_under_the_interpreter(tmp_path):
    """The README's quick start, as a user runs it on a CPU: TRITON_INTERPRET=1, pruned to
    top_k=4 of 108 configs by the shipped model without a fallback."""
    import os
    import subprocess
    import sys

    script = tmp_path / "quickstart.py"
    script.write_text(readme_block("## Quick start"))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "benchmarked 4 of 108; best BLOCK_M" in done.stdout
    assert "CosttuneWarning" not in done.stderr, done.stderr
