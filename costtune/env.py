"""Where a measurement was taken: GPU, clocks, driver, library versions, code commit.

``environment()`` is the ``meta`` a collector hands to ``Store.append``; call ``sm_clock_mhz()``
again at the end of a run to record clock drift. Nothing heavy happens at import.
"""

from __future__ import annotations

import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

_SMI_TIMEOUT_S = 10.0
_PACKAGE_DIR = Path(__file__).resolve().parent


def environment(device: Any = None, *, sm_clock: bool = True) -> dict[str, Any]:
    """Describe the machine and software for ``device`` (a CUDA index, "cuda:1" or
    torch.device; None = the current device).

    On a CPU-only machine the GPU fields read ``gpu="cpu"`` and None. The driver and library
    versions are read once per process; ``sm_clock=False`` skips the one nvidia-smi call left
    (``sm_clock_mhz`` is None then; ``sm_clock_reader`` reads it without waiting).

    >>> env = environment()
    >>> env["gpu"] == "cpu" or env["sm_count"] > 0
    True
    """
    gpu = _gpu_info(device)
    smi_id = gpu.pop("smi_id")
    commit, dirty = git_state()
    return {
        **gpu,
        "driver": _driver(smi_id) if smi_id is not None else None,
        **_software(),
        "hostname": socket.gethostname(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "costtune_commit": commit,
        "costtune_dirty": dirty,
        "sm_clock_mhz": _clock(smi_id) if sm_clock and smi_id is not None else None,
        "command": shlex.join(sys.argv),
    }


@cache
def _software() -> dict[str, Any]:
    return {"cuda": _torch_cuda_version(), "torch": _version("torch"),
            "triton": _version("triton"), "python": platform.python_version(),
            "numpy": _version("numpy")}


@cache
def _driver(smi_id: str) -> str | None:
    out = _nvidia_smi(["driver_version"], smi_id)
    return out[0] if out else None


def cpu_topology() -> dict[str, int]:
    """Usable logical CPUs and the distinct physical cores under them (Linux sysfs)."""
    cpus = sorted(os.sched_getaffinity(0))
    cores = set()
    for cpu in cpus:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((base / "physical_package_id").read_text().strip()
                      + ":" + (base / "core_id").read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return {"logical": len(cpus), "physical": len(cores)}


_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def host_cpu_times() -> dict[str, float] | None:
    """The host's CPU time so far (seconds summed over CPUs, ``psutil.cpu_times``: /proc/stat
    on Linux; fields a platform lacks read 0) and a monotonic ``at``; None where it cannot be
    read. Two readings give ``host_cpu_use``."""
    import psutil

    try:
        times = psutil.cpu_times()
    except OSError:
        return None
    out = {name: float(getattr(times, name, 0.0)) for name in _CPU_FIELDS}
    out["at"] = time.monotonic()
    return out


def host_cpu_use(before: dict[str, float] | None, after: dict[str, float] | None
                 ) -> dict[str, float]:
    """What the host's CPUs did between two ``host_cpu_times`` readings: busy CPUs on average
    (user, nice, system, irq, softirq), of which niced (processes at nice > 0, such as the
    compile pools), and steal (time the hypervisor ran something else while a CPU of this
    machine wanted to run) as a share of all CPU time. Empty where either reading is None."""
    if before is None or after is None:
        return {}
    wall = after["at"] - before["at"]
    if wall <= 0:
        raise ValueError(f"host_cpu_use: readings out of order ({wall:.3f} s apart)")
    d = {k: after[k] - before[k] for k in _CPU_FIELDS}
    total = sum(d.values())
    busy = d["user"] + d["nice"] + d["system"] + d["irq"] + d["softirq"]
    return {"wall_s": wall, "busy_cpus": busy / wall, "niced_cpus": d["nice"] / wall,
            "steal_share": d["steal"] / total if total > 0 else float("nan")}


def sm_clock_reader(device: int | str | None = None) -> Callable[[], int | None]:
    """Start reading ``device``'s SM clock now, without waiting for nvidia-smi (which takes
    a good part of a second on some hosts); the returned function waits for and returns it
    (MHz, or None when it cannot be read).

    >>> read = sm_clock_reader()
    >>> clock = read()
    >>> clock is None or clock > 0
    True
    """
    cmd = _smi_cmd(["clocks.sm"], _smi_id(device))
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
    except OSError:
        return lambda: None

    def read() -> int | None:
        try:
            out, _ = proc.communicate(timeout=_SMI_TIMEOUT_S)
        except subprocess.SubprocessError:
            proc.kill()
            proc.communicate()
            return None
        values = _smi_values(out, proc.returncode, 1)
        return _to_int(values[0]) if values else None

    return read


def sm_clock_mhz(device: int | str | None = None) -> int | None:
    """Current SM clock of ``device`` in MHz from nvidia-smi; None when it cannot be read.

    ``device``: a CUDA index (mapped through CUDA_VISIBLE_DEVICES), or an nvidia-smi id such as
    a ``GPU-<uuid>`` string.

    >>> sm_clock_mhz() is None or sm_clock_mhz() > 0
    True
    """
    return _clock(_smi_id(device))


def _clock(smi_id: str) -> int | None:
    out = _nvidia_smi(["clocks.sm"], smi_id)
    return _to_int(out[0]) if out else None


def git_state(path: str | os.PathLike | None = None) -> tuple[str, bool | None]:
    """(HEAD commit, uncommitted changes?) of the repo holding the costtune package; ("", None)
    when the package is not in a git checkout (e.g. installed from a wheel)."""
    pkg = Path(path) if path is not None else _PACKAGE_DIR
    top = _git(pkg, "rev-parse", "--show-toplevel")
    # An installed copy may sit inside some unrelated repo (a venv in a project): ignore that.
    in_checkout = bool(top) and (Path(top) / pkg.name).resolve() == pkg.resolve()
    head = _git(pkg, "rev-parse", "HEAD") if in_checkout else None
    status = _git(pkg, "status", "--porcelain", "--untracked-files=no") if in_checkout else None
    dirty = bool(status) if status is not None else None
    # A copy of the tree sent to another machine (no .git, or a stale one) knows its commit
    # only from the launcher, which passes it in COSTTUNE_COMMIT: that wins. Its dirtiness is
    # known only when the copy's own .git agrees on the commit.
    given = os.environ.get("COSTTUNE_COMMIT", "").strip()
    if given:
        return given, (dirty if head and head.startswith(given) else None)
    return (head or "", dirty) if in_checkout else ("", None)


def _gpu_info(device: int | str | None) -> dict[str, Any]:
    info: dict[str, Any] = {"gpu": "cpu", "gpu_uuid": None, "sm_count": None,
                            "compute_capability": None, "smi_id": None}
    torch = _torch_if_cuda()
    if torch is None:
        return info
    if isinstance(device, int):
        index = device
    else:
        dev = torch.device(device) if device is not None else None
        index = dev.index if dev is not None and dev.index is not None else (
            torch.cuda.current_device())
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    info.update(gpu=props.name, sm_count=props.multi_processor_count,
                compute_capability=f"{props.major}.{props.minor}",
                gpu_uuid=f"GPU-{uuid}" if uuid is not None else None)
    info["smi_id"] = info["gpu_uuid"] or _smi_id(index)
    return info


def _torch_if_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _torch_cuda_version() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.version.cuda


def _smi_id(device: int | str | None) -> str:
    """nvidia-smi's -i argument for a CUDA index, honouring CUDA_VISIBLE_DEVICES."""
    if isinstance(device, str):
        device = device.removeprefix("cuda:").removeprefix("cuda")
        if not device.isdigit() and device:
            return device
    index = int(device or 0)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    return visible[index] if index < len(visible) else str(index)


def _smi_cmd(fields: list[str], smi_id: str) -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
            "-i", smi_id]


def _nvidia_smi(fields: list[str], smi_id: str) -> list[str] | None:
    try:
        res = subprocess.run(_smi_cmd(fields, smi_id), capture_output=True, text=True,
                             timeout=_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return _smi_values(res.stdout, res.returncode, len(fields))


def _smi_values(stdout: str, returncode: int | None, n: int) -> list[str] | None:
    lines = stdout.strip().splitlines()
    if returncode != 0 or not lines:
        return None
    values = [v.strip() for v in lines[0].split(",")]
    return values if len(values) == n else None


def _git(cwd: Path, *args: str) -> str | None:
    try:
        res = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _to_int(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None
