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


class _FakeNvml:
    """A stand-in for pynvml with one GPU (index 0, uuid GPU-abc) at 1980 MHz."""

    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802 (pynvml's names)
        if index != 0:
            raise self.NVMLError("invalid argument")
        return "handle0"

    def nvmlDeviceGetHandleByUUID(self, uuid):  # noqa: N802
        if uuid != "GPU-abc":
            raise self.NVMLError("not found")
        return "handle0"

    def nvmlDeviceGetClockInfo(self, handle, kind):  # noqa: N802
        assert handle == "handle0" and kind == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetCount(self):  # noqa: N802
        return 1


def test_sm_clock_and_gpu_count_come_from_nvml(monkeypatch):
    import costtune.env as env

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(env._NVML_STATE, "module", _FakeNvml())
    assert env.sm_clock_mhz(0) == 1980 and env.sm_clock_mhz("GPU-abc") == 1980
    assert env.sm_clock_reader(0)() == 1980  # a reading taken at the call agrees
    assert env.gpu_count() == 1
    assert env.sm_clock_mhz(3) is None and env.sm_clock_mhz("GPU-other") is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")  # CUDA index 0 is that GPU
    assert env.sm_clock_mhz(0) == 1980
    monkeypatch.setitem(env._NVML_STATE, "module", None)  # no driver / no nvidia-ml-py
    assert env.sm_clock_reader(0)() is None and env.sm_clock_mhz(0) is None
    assert env.gpu_count() is None


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
