"""The pruning hook's stage 2 (``two_stage=True``): the best ``shortlist`` configs of stage 1
compiled (AOT, on the CPU) and re-ranked with compiled features.

The kernel compiled is the user's own, specialized on the call's arguments
(``tune.ranking.kernel_compiled_table``); costtune's kernel of the family at the same configs
only where the user's cannot compile here (the interpreter). The model is the kernel's own
stage-2 model when ``learn=True`` taught one (``tune.learn``, blended with stage 1 at
``LEARNED_WEIGHT`` unless a weight is given), else the given or shipped stage-2 model, blended
at the family's shipped weight (``tune.ranking.blend_order``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from costtune.tune.learn import STAGE2

__all__ = ["LEARNED_WEIGHT", "rerank"]

# The stage-1 weight once learn=True has taught the kernel its stage-2 model: chosen by
# experiments/learning_curve_stage2.py on held-out implementations' unharvested train-suite
# shapes (tests/test_learning_curve.py checks it against the committed results).
LEARNED_WEIGHT = 0.25  # 0.5 until the rerun on fifteen implementations (2026-12-07)


def rerank(pruner: Any, launch: Any, params: list[dict], features: Any, keys: np.ndarray,
           order: np.ndarray, decision: Any, notes: list[tuple[str, str]],
           stage1: np.ndarray, live_configs: Sequence[Any]) -> np.ndarray:
    """``order`` (positions of the live configs, best first) with its best ``shortlist``
    re-ranked by the stage-2 model (see the module doc); notes say why it was skipped."""
    from costtune.tune.ranking import (
        compiled_table,
        default_stage2,
        kernel_compiled_table,
        load_noted,
        stage1_weight,
        stage2_order,
        uses_compiled,
    )

    source = default_stage2(pruner.model) if pruner.stage2_model is None else pruner.stage2_model
    try:  # the kernel's own stage-2 model when learn=True taught one (tune.learn)
        learned_dir = None if pruner.kernel_dir is None else Path(pruner.kernel_dir) / STAGE2
        model = load_noted(source, launch.family, kernel_dir=learned_dir, compact=True)[0]
    except Exception as exc:
        notes.append(("two_stage", f"no stage-2 model {source!r} ({exc}); stage 2 skipped"))
        return order
    if not uses_compiled(model):
        notes.append(("two_stage", f"two_stage needs a model with compiled features; "
                      f"{source!r} has only static ones, stage 2 skipped"))
        return order
    short = order[: max(decision.k, pruner.shortlist)]
    try:  # the user's own kernel, compiled at each config as this call would launch it
        table = kernel_compiled_table(pruner._tuned, pruner._args,
                                      [live_configs[i] for i in short],
                                      cache_dir=pruner.cache_dir, workers=pruner.workers,
                                      memo=pruner._compiled)
        decision.stage2_kernel = "yours"
    except Exception as exc:
        try:  # else costtune's own kernel of the family at the same configs
            table = compiled_table(launch, [params[i] for i in short],
                                   cache_dir=pruner.cache_dir, workers=pruner.workers,
                                   memo=pruner._compiled)
        except Exception as exc2:  # e.g. a broken compile pool: the static ranking stands
            notes.append(("two_stage", f"compiled features failed ({type(exc2).__name__}: "
                          f"{exc2}); stage 2 skipped"))
            return order
        # Expected under Triton's interpreter (nothing there is a JIT function): told in
        # the decision, not warned.
        decision.stage2_kernel = (f"costtune's {launch.family} (yours could not be "
                                  f"compiled here: {type(exc).__name__}: "
                                  f"{str(exc)[:200]})")
    learned = getattr(model, "learned_path_", None)
    decision.stage2_model = learned or str(source)[:80]
    weight = (LEARNED_WEIGHT if learned and pruner.stage1_weight is None
              else stage1_weight(source, launch.family, pruner.stage1_weight))
    sub = stage2_order(model, features.iloc[short], table=table, keys=keys[short],
                       stage1=stage1[short], weight=weight)
    decision.stage2 = True
    return np.concatenate([short[sub], order[len(short):]])
