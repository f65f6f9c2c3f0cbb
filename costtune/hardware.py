"""The target GPU, described once: every stage (spaces, features, baselines, the hook's
feasibility checks) reads its limits and rates from here.

``H200`` is the GPU the shipped data and models come from. ``target(arch)`` gives the limits of
another compute capability where they are known (shared memory differs across archs), with the
H200's rates, which are only used by the roofline baseline.

>>> from costtune.hardware import H200
>>> H200.max_shared_per_block, H200.num_sms
(232448, 132)
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Target:
    """One GPU's limits (per SM, per block) and the rates the roofline baseline assumes."""

    name: str
    arch: int  # compute capability as an int: 90 for sm_90
    num_sms: int
    # Opt-in shared memory per block (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN):
    # what Triton checks when it loads a kernel.
    max_shared_per_block: int
    # Shared memory per SM: the per-block opt-in limit plus the 1 KiB the driver reserves.
    shared_per_sm: int
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    max_threads_per_block: int = 1024
    max_warps_per_sm: int = 64
    max_ctas_per_sm: int = 32
    warp_size: int = 32
    l2_bytes: int = 50 * 2**20
    peak_tensor_flops: float = 790e12  # measured bf16 matmul rate, H200
    peak_fp32_flops: float = 60e12  # CUDA-core fp32 (spec ~67 TFLOP/s, less in practice)
    dram_bw: float = 4.3e12  # measured device copy bandwidth, bytes/s
    l2_bw: float = 12e12  # L2 -> SM bandwidth (H100-class figure, not measured here)

    @property
    def max_warps_per_block(self) -> int:
        return self.max_threads_per_block // self.warp_size


H200 = Target(name="NVIDIA H200", arch=90, num_sms=132, max_shared_per_block=232448,
              shared_per_sm=233472)

# Per-block opt-in shared memory of other archs (the per-SM figure is 1 KiB more).
_MAX_SHARED = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448,
               120: 101376}


def target(arch: int = 90) -> Target:
    """The limits of ``arch`` (H200's SM count and rates where the arch is not the H200's).

    >>> target(80).max_shared_per_block
    166912
    """
    if arch == H200.arch:
        return H200
    if arch not in _MAX_SHARED:
        raise ValueError(f"unknown GPU arch sm_{arch}; known: {sorted(_MAX_SHARED)}")
    shared = _MAX_SHARED[arch]
    return replace(H200, name=f"sm_{arch}", arch=arch, max_shared_per_block=shared,
                   shared_per_sm=shared + 1024)


def known_archs() -> list[int]:
    return sorted(_MAX_SHARED)


def current_arch() -> int:
    """sm_XY of this host's GPU as an int; the H200's (90) without a GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return 10 * major + minor
    except Exception:
        pass
    return H200.arch


def current() -> Target:
    """The target of this host's GPU (the H200 without a GPU, or for an unknown arch)."""
    arch = current_arch()
    return target(arch) if arch in _MAX_SHARED else H200
