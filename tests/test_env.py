"""Provenance: which commit a measurement was made with."""

from __future__ import annotations

import subprocess
from pathlib import Path

from costtune.env import git_state

ROOT = Path(__file__).resolve().parents[1]


def _head() -> str | None:
    res = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                         text=True)
    return res.stdout.strip() if res.returncode == 0 else None


def test_launcher_commit_wins_over_a_stale_copy(monkeypatch):
    monkeypatch.setenv("COSTTUNE_COMMIT", "0123abc")
    assert git_state() == ("0123abc", None)  # whatever .git says, dirtiness is unknown
    head = _head()
    if head:  # in a checkout whose HEAD is the given commit, dirtiness is known
        monkeypatch.setenv("COSTTUNE_COMMIT", head[:7])
        commit, dirty = git_state()
        assert commit == head[:7] and isinstance(dirty, bool)


def test_checkout_and_not(monkeypatch, tmp_path):
    monkeypatch.delenv("COSTTUNE_COMMIT", raising=False)
    head = _head()
    if head:
        assert git_state()[0] == head
    pkg = tmp_path / "costtune"
    pkg.mkdir()
    assert git_state(pkg) == ("", None)  # an installed copy outside any checkout


def _fake_smi(tmp_path: Path, body: str) -> str:
    """A directory holding an ``nvidia-smi`` that runs ``body`` (a shell snippet)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    smi.chmod(0o755)
    return str(bin_dir)


def test_sm_clock_reader_does_not_wait(monkeypatch, tmp_path):
    import os
    import time

    from costtune.env import sm_clock_mhz, sm_clock_reader

    monkeypatch.setenv("PATH", _fake_smi(tmp_path, 'sleep 0.5; echo "1980"') + os.pathsep
                       + os.environ["PATH"])
    start = time.perf_counter()
    read = sm_clock_reader(0)
    assert time.perf_counter() - start < 0.3  # nvidia-smi still running
    assert read() == 1980 and time.perf_counter() - start >= 0.5
    assert sm_clock_mhz(0) == 1980  # the waiting read agrees
    monkeypatch.setenv("PATH", _fake_smi(tmp_path, "echo 'No devices were found'; exit 6"))
    assert sm_clock_reader(0)() is None and sm_clock_mhz(0) is None
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no nvidia-smi at all
    assert sm_clock_reader(0)() is None
