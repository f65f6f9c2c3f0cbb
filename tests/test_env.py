"""Provenance: which commit a measurement was made with, and what the host's CPUs did."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

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


def test_host_cpu_use_reads_busy_niced_and_steal_from_proc_stat(tmp_path, monkeypatch):
    import psutil

    from costtune.env import host_cpu_times, host_cpu_use

    tick = os.sysconf("SC_CLK_TCK")
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path))  # psutil reads <it>/stat
    #                 user nice system idle iowait irq softirq steal guest guest_nice
    (tmp_path / "stat").write_text("cpu  1000 2000 300 9000 50 10 20 100 0 0\n"
                                   "cpu0 1 2 3 4 5 6 7 8 0 0\n")
    before = host_cpu_times()
    assert before["nice"] == pytest.approx(2000 / tick) and before["steal"] == 100 / tick
    after = {**before, "at": before["at"] + 2.0, "user": before["user"] + 3.0,
             "nice": before["nice"] + 8.0, "system": before["system"] + 1.0,
             "idle": before["idle"] + 6.0, "steal": before["steal"] + 2.0}
    use = host_cpu_use(before, after)
    assert use["busy_cpus"] == pytest.approx(6.0)  # (3 + 8 + 1) CPU-seconds over 2 s
    assert use["niced_cpus"] == pytest.approx(4.0)
    assert use["steal_share"] == pytest.approx(2.0 / 20.0)
    assert host_cpu_use(None, after) == {}
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(tmp_path / "absent"))
    assert host_cpu_times() is None  # nothing to read: no reading, no error
    with pytest.raises(ValueError, match="readings out of order"):
        host_cpu_use(after, before)
