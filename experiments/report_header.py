"""The provenance header every experiment writes at the top of its results/<name>.md."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path


def provenance(dataset: Path, n_rows: int) -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"- Data: `{dataset}` ({n_rows:,} rows, timed on an NVIDIA H200; see its "
            f"DATASHEET.md).\n- Command: `python {' '.join(sys.argv)}`\n"
            f"- Generated {when} at commit {commit} (CPU only).")
