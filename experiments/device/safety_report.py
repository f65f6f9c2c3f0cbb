"""Report of issue 21's H200 check (``safety_h200.py``) from its raw JSON lines.

    python experiments/device/safety_report.py [RAW.jsonl ...] > experiments/results/safety_h200.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

RAW = Path(__file__).resolve().parents[1] / "results" / "raw" / "safety_h200"


def rows(paths: list[Path]) -> tuple[dict, pd.DataFrame]:
    env, out = {}, []
    for path in paths:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if "result" not in rec:
                continue
            env = rec.get("env") or env
            res = rec["result"]
            got = res.get("checked", res)
            out.append({
                "commit": (rec.get("env") or {}).get("costtune_commit"),
                "run": rec["id"], "status": rec["status"], "configs": res.get("n_configs", 384),
                "top_k": rec["run"].get("top_k"),
                "tune_s": round(got.get("tune_s", float("nan")), 1),
                "benchmarked": got.get("benchmarked"), "kept": got.get("kept"),
                "dropped (cannot launch)": _count(got.get("dropped", res.get("dropped"))),
                "chosen": got.get("chosen"), "chosen_ms": got.get("chosen_ms"),
                "torch_ms": got.get("torch_ms"), "rel_err": got.get("rel_err"),
                "rejected by check= / replaced": "; ".join(
                    f"{k}: {v}" for k, v in (got.get("rejected") or {}).items()) or "none"})
    return env, pd.DataFrame(out)


def _count(value) -> int | None:
    return len(value) if isinstance(value, dict | list) else value


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted(RAW.glob("*.jsonl"))
    env, df = rows(paths)
    print("# Issue 21 on the H200: pruning never makes tuning fail\n")
    print(f"- GPU {env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, "
          f"triton {env.get('triton')}; command `{env.get('command')}`")
    print("- Device calls: `COSTTUNE_COMMIT=<commit> bash experiments/device/call_safety_h200.sh`"
          " (nvidia-h200, seventh session's calls 2 at 4c4cdf8 and 6 at f1102f8; the "
          "twenty-third session's call 12 at acc25cd ran `safety_h200.py --deadline-s 200` "
          "alone, after the same-error stop); raw lines in `raw/safety_h200/`; this report: "
          "`python experiments/device/safety_report.py`\n")
    print(df.to_markdown(index=False))


if __name__ == "__main__":
    main()
