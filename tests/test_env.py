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
