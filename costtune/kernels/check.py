"""Quick correctness check of every family on small shapes (CPU interpreter or GPU)."""

from __future__ import annotations

import math
import random

from costtune.kernels import family_of, get_implementation, relative_error

# Small shapes with ragged sizes, so masking paths run; cheap enough for the interpreter.
CHECK_PROBLEMS = {
    "gemm": [{"M": 37, "N": 45, "K": 70}, {"M": 64, "N": 32, "K": 300}],
    "softmax": [{"rows": 5, "cols": 77}, {"rows": 3, "cols": 1000}],
    "attention": [{"B": 1, "H": 2, "S": 40, "D": 64, "causal": 1},
                  {"B": 1, "H": 1, "S": 72, "D": 64, "causal": 0}],
}


def _block_volume(config) -> float:
    return sum(math.log2(v) for k, v in config.as_dict().items()
               if k.startswith("BLOCK") and isinstance(v, int) and v > 0)


def check_family(name: str, *, seed: int = 0, n_configs: int = 3, device: str = "cpu"
                 ) -> list[str]:
    """Run a few small-block configs per check problem and dtype; return error strings.
    ``name``: a family (its original kernel) or an implementation."""
    fam = get_implementation(name)
    errors = []
    rng = random.Random(seed)
    for problem in CHECK_PROBLEMS[family_of(name)]:
        configs = sorted(fam.config_space(problem).configs(), key=lambda c: (_block_volume(c),
                                                                             c.key))
        pool = configs[: max(n_configs, 12)]
        for dtype in fam.DTYPES:
            inputs = fam.make_inputs(problem, dtype, seed=seed, device=device)
            ref = fam.reference(inputs)
            for config in rng.sample(pool, min(n_configs, len(pool))):
                try:
                    err = relative_error(fam.launch(inputs, config), ref)
                except Exception as exc:  # report, keep checking the rest
                    errors.append(f"{problem} {dtype} {config.key}: {type(exc).__name__}: {exc}")
                    continue
                if not err <= fam.TOLERANCE[dtype]:
                    errors.append(f"{problem} {dtype} {config.key}: rel err {err:.2e}")
    return errors
