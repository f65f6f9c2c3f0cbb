"""The same config on every rank: ``costtune.autotune(..., ranks="rank0")``.

Under ``torch.distributed`` each rank tuning on its own can pick a different config for the
same key (timing noise, another GPU's clocks), so ranks run different kernels. With
``ranks="rank0"``, rank 0 tunes each new key and broadcasts its choice (the config's key and
values, ``broadcast_object_list`` on the default group); the other ranks launch it without
benchmarking. Every rank must make the same tuning calls in the same order, as with any
collective (with NCCL, each rank's CUDA device set, as object collectives need). Without an
initialized process group (or with one rank) nothing changes; if rank 0's tuning fails it
still broadcasts (nothing), and the other ranks raise instead of waiting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from costtune.tune.decision import config_key

__all__ = ["RANKS", "check_ranks", "choice", "config_from", "tuning_key", "world"]

RANKS = ("each", "rank0")


def check_ranks(ranks: Any) -> str:
    """``ranks`` if valid, else a one-line ValueError."""
    if not isinstance(ranks, str) or ranks not in RANKS:
        raise ValueError(f"ranks must be one of {list(RANKS)}, got {ranks!r}")
    return ranks


def world() -> Any:
    """``torch.distributed`` when a process group with more than one rank is initialized,
    else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    return dist


def tuning_key(arg_names: Sequence[str], keys: Sequence[str], args: tuple,
               kwargs: dict[str, Any]) -> tuple:
    """The key ``Autotuner.run`` (triton 3.6) caches a tuning under: the ``key`` args'
    values, then the dtype of every arg that has one."""
    named = {**dict(zip(arg_names, args)), **kwargs}
    named = {k: v for k, v in named.items() if k in arg_names}
    key = [named[k] for k in keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


def choice(config: Any, configs: Sequence[Any] = ()) -> dict[str, Any] | None:
    """What rank 0 broadcasts: the config's canonical key, values and position in ``configs``
    (no pre_hook: the other ranks take theirs from their own config list, at that position
    where the key matches there: configs alike but for their pre_hook share a key)."""
    if config is None:
        return None
    position = next((i for i, c in enumerate(configs) if c is config), None)
    return {"key": config_key(config), "kwargs": dict(config.kwargs), "position": position,
            **{name: getattr(config, name, None)
               for name in ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")}}


def config_from(sent: dict[str, Any], configs: Sequence[Any]) -> Any:
    """The config of ``configs`` at the broadcast position, else the first with the broadcast
    key (its pre_hook included), else one built from the broadcast values."""
    position = sent.get("position")
    if position is not None and position < len(configs) and config_key(
            configs[position]) == sent["key"]:
        return configs[position]
    for config in configs:
        if config_key(config) == sent["key"]:
            return config
    from triton import Config

    return Config(sent["kwargs"], **{k: v for k, v in sent.items()
                                     if k not in ("key", "kwargs", "position") and v is not None})
