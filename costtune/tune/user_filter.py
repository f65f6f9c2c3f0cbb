"""The user's own ``early_config_prune`` under costtune's pruning hook: Triton's
``prune_configs_by`` filter (tutorial 06 drops BLOCK_M > N_CTX, a correctness condition),
run first on every call; the model ranks only what it keeps."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from costtune.tune.decision import config_key

__all__ = ["user_filtered"]


def user_filtered(user_prune: Callable[..., Any], configs: Sequence[Any], keys: Sequence[str],
                  named_args: Mapping[str, Any], kwargs: dict[str, Any],
                  notes: list[tuple[str, str]]) -> set[int]:
    """Positions of ``configs`` (canonical ``keys``) that ``user_prune(configs, named_args,
    **kwargs)`` did not keep, matched by identity or config key; its own errors propagate, as
    under Triton. Configs it returns that the list lacks cannot be ranked or replaced: said in
    a warning; keeping none of the list is a ValueError (Triton raises too)."""
    chosen = list(user_prune(configs, named_args, **kwargs))
    ids = {id(c) for c in chosen}
    wanted = {config_key(c) for c in chosen}
    allowed = {i for i, c in enumerate(configs) if id(c) in ids or keys[i] in wanted}
    foreign = sorted(wanted - set(keys))
    if foreign:
        notes.append(("filter", f"your early_config_prune returned {len(foreign)} config(s) "
                      f"not in the list ({'; '.join(foreign[:2])}); only configs of the list "
                      "are benchmarked"))
    if not allowed:
        raise ValueError(f"your early_config_prune kept none of the {len(configs)} configs"
                         + (" (it returned configs of its own: costtune ranks the list's; "
                            "filter the list before passing it)" if foreign else ""))
    return set(range(len(configs))) - allowed
