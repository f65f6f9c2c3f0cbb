"""The user's own ``early_config_prune`` under costtune's pruning hook: Triton's
``prune_configs_by`` filter (tutorial 06 drops BLOCK_M > N_CTX, a correctness condition),
run first on every call; the model ranks only what it keeps."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from costtune.tune.decision import config_key

__all__ = ["user_filtered"]


def user_filtered(user_prune: Callable[..., Any], configs: Sequence[Any],
                  named_args: Mapping[str, Any], kwargs: dict[str, Any]
                  ) -> tuple[Sequence[Any], set[int]]:
    """(the configs to rank, positions among them the filter did not keep) after
    ``user_prune(configs, named_args, **kwargs)``; its own errors propagate, as under Triton.
    Its result is matched to the list by identity or config key, read after it ran (a filter
    may change configs in place). A filter that returns configs of its own (Triton's old
    ``prune_num_stages`` built new ones) has its whole result ranked, as Triton would
    benchmark it; keeping nothing is a ValueError (Triton fails too)."""
    chosen = list(user_prune(configs, named_args, **kwargs))
    if not chosen:
        raise ValueError(f"your early_config_prune kept none of the {len(configs)} configs")
    keys = [config_key(c) for c in configs]
    ids, known = {id(c) for c in configs}, set(keys)
    if any(id(c) not in ids and config_key(c) not in known for c in chosen):
        return chosen, set()
    wanted = {config_key(c) for c in chosen}
    chosen_ids = {id(c) for c in chosen}
    allowed = {i for i, c in enumerate(configs) if id(c) in chosen_ids or keys[i] in wanted}
    return configs, set(range(len(configs))) - allowed
