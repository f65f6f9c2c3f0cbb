"""Quick correctness check of every family on small shapes (CPU interpreter or GPU)."""

from __future__ import annotations

import math
import random

from costtune.kernels import family_of, get_implementation, relative_error
from costtune.kernels.base import poisoned_scratch

# Small shapes with ragged sizes, so masking paths run; cheap enough for the interpreter.
CHECK_PROBLEMS = {
    "gemm": [{"M": 37, "N": 45, "K": 70}, {"M": 64, "N": 32, "K": 300},
             # K and N multiples of 8: what TMA kernels take (16-byte row strides); K long
             # enough for split-K (>= 4 K tiles a split)
             {"M": 37, "N": 40, "K": 72}, {"M": 37, "N": 40, "K": 520}],
    "softmax": [{"rows": 5, "cols": 77}, {"rows": 3, "cols": 1000}],
    "attention": [{"B": 1, "H": 2, "S": 40, "D": 64, "causal": 1},
                  {"B": 1, "H": 1, "S": 72, "D": 64, "causal": 0},
                  # S a multiple of every query block: for kernels without masked edges
                  {"B": 1, "H": 1, "S": 128, "D": 64, "causal": 1}],
}


def _block_volume(config) -> float:
    return sum(math.log2(v) for k, v in config.as_dict().items()
               if k.startswith("BLOCK") and isinstance(v, int) and v > 0)


def check_family(name: str, *, seed: int = 0, n_configs: int = 3, device: str = "cpu"
                 ) -> list[str]:
    """Run a few small-block configs per check problem and dtype; return error strings.
    ``name``: a family (its original kernel) or an implementation."""
    fam = get_implementation(name)
    errors: list[str] = []
    rng = random.Random(seed)
    checked = 0
    for problem in CHECK_PROBLEMS[family_of(name)]:
        try:
            space = fam.config_space(problem).configs()
        except ValueError:  # this implementation takes no config at these sizes (TMA tiles)
            continue
        configs = sorted(space, key=lambda c: (_block_volume(c), c.key))
        pool = configs[: max(n_configs, 12)]
        for dtype in fam.DTYPES:
            inputs = fam.make_inputs(problem, dtype, seed=seed, device=device)
            try:  # the implementation refuses these inputs before launching (TMA strides)
                fam.kernel_calls(inputs, pool[0])
            except ValueError:
                continue
            checked += 1
            ref = fam.reference(inputs)
            for config in rng.sample(pool, min(n_configs, len(pool))):
                try:
                    with poisoned_scratch():
                        err = relative_error(fam.launch(inputs, config), ref)
                except Exception as exc:  # report, keep checking the rest
                    errors.append(f"{problem} {dtype} {config.key}: {type(exc).__name__}: {exc}")
                    continue
                if not err <= fam.TOLERANCE[dtype]:
                    errors.append(f"{problem} {dtype} {config.key}: rel err {err:.2e}")
    if not checked:
        errors.append(f"no check problem {CHECK_PROBLEMS[family_of(name)]} fits {name}'s "
                      "config space")
    return errors
