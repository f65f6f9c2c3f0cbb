"""Where a measurement was taken: GPU, clocks, driver (NVML, through nvidia-ml-py), library
versions, code commit.

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

_PACKAGE_DIR = Path(__file__).resolve().parent


def environment(device: Any = None, *, sm_clock: bool = True) -> dict[str, Any]:
    """Describe the machine and software for ``device`` (a CUDA index, "cuda:1" or
    torch.device; None = the current device).

    On a CPU-only machine the GPU fields read ``gpu="cpu"`` and None. The driver (NVML) and
    library versions are read once per process; ``sm_clock=False`` leaves ``sm_clock_mhz``
    None.

    >>> env = environment()
    >>> env["gpu"] == "cpu" or env["sm_count"] > 0
    True
    """
    gpu = _gpu_info(device)
    nvml_id = gpu.pop("nvml_id")
    commit, dirty = git_state()
    return {
        **gpu,
        "driver": _driver(nvml_id) if nvml_id is not None else None,
        **_software(),
        "hostname": socket.gethostname(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "costtune_commit": commit,
        "costtune_dirty": dirty,
        "sm_clock_mhz": _clock(nvml_id) if sm_clock and nvml_id is not None else None,
        "command": shlex.join(sys.argv),
    }


@cache
def _software() -> dict[str, Any]:
    return {"cuda": _torch_cuda_version(), "torch": _version("torch"),
            "triton": _version("triton"), "python": platform.python_version(),
            "numpy": _version("numpy")}


@cache
def _driver(nvml_id: str) -> str | None:
    nvml, handle = _nvml_handle(nvml_id)
    if handle is None:
        return None
    try:
        version = nvml.nvmlSystemGetDriverVersion()
    except nvml.NVMLError:
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def gpu_problem() -> str | None:
    """Why no CUDA GPU can be used here, precisely (None when one can)."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None)"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return "CUDA_VISIBLE_DEVICES is set but empty: no GPU is visible"
    try:
        torch.cuda.init()
    except Exception as exc:
        text = " ".join(str(exc).split())
        return f"CUDA does not start ({type(exc).__name__}: {text})"
    return (f"no CUDA GPU is visible (torch {torch.__version__} for CUDA {torch.version.cuda}; "
            f"CUDA_VISIBLE_DEVICES={visible!r})")


def require_gpu(what: str) -> None:
    """Raise RuntimeError naming ``what`` and why, unless a CUDA GPU can be used here."""
    problem = gpu_problem()
    if problem is not None:
        raise RuntimeError(f"{what} measures on a CUDA GPU and {problem}")


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
    """A reading of ``device``'s SM clock taken now; the returned function returns it (MHz,
    or None when it cannot be read). Kept for callers that start a reading early and collect
    it later; NVML answers at once.

    >>> read = sm_clock_reader()
    >>> clock = read()
    >>> clock is None or clock > 0
    True
    """
    clock = sm_clock_mhz(device)
    return lambda: clock


def sm_clock_mhz(device: int | str | None = None) -> int | None:
    """Current SM clock of ``device`` in MHz (NVML); None when it cannot be read.

    ``device``: a CUDA index (mapped through CUDA_VISIBLE_DEVICES), or a ``GPU-<uuid>``.

    >>> sm_clock_mhz() is None or sm_clock_mhz() > 0
    True
    """
    return _clock(_nvml_id(device))


def gpu_count() -> int | None:
    """GPUs on this host (NVML; whatever CUDA_VISIBLE_DEVICES says); None without NVML."""
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        return int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError:
        return None


def _clock(nvml_id: str) -> int | None:
    nvml, handle = _nvml_handle(nvml_id)
    if handle is None:
        return None
    try:
        return int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
    except nvml.NVMLError:
        return None


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
                            "compute_capability": None, "nvml_id": None}
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
    info["nvml_id"] = info["gpu_uuid"] or _nvml_id(index)
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


def _nvml_id(device: int | str | None) -> str:
    """NVML's id (index or ``GPU-<uuid>``) of a CUDA index, honouring CUDA_VISIBLE_DEVICES."""
    if isinstance(device, str):
        device = device.removeprefix("cuda:").removeprefix("cuda")
        if not device.isdigit() and device:
            return device
    index = int(device or 0)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    return visible[index] if index < len(visible) else str(index)


_NVML_STATE: dict[str, Any] = {}


def _nvml() -> Any:
    """The initialised ``pynvml`` module (nvidia-ml-py), or None where NVML cannot start (no
    driver, a CPU-only machine, the package absent)."""
    if "module" not in _NVML_STATE:
        try:
            import pynvml

            pynvml.nvmlInit()
            _NVML_STATE["module"] = pynvml
        except Exception:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded
            _NVML_STATE["module"] = None
    return _NVML_STATE["module"]


def _nvml_handle(nvml_id: str) -> tuple[Any, Any]:
    """(pynvml, device handle) for an NVML index or a ``GPU-<uuid>``; (module, None) when
    NVML is missing or knows no such device."""
    nvml = _nvml()
    if nvml is None:
        return None, None
    try:
        if nvml_id.isdigit():
            return nvml, nvml.nvmlDeviceGetHandleByIndex(int(nvml_id))
        return nvml, nvml.nvmlDeviceGetHandleByUUID(nvml_id)
    except nvml.NVMLError:
        return nvml, None


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
