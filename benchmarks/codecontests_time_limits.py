"""How many published correct Python 3 CodeContests solutions pass at each time-limit factor.

    python benchmarks/codecontests_time_limits.py [--split test] [--data-dir D] [--factors 1,2,3,5]
        [--problems 0] [--per-problem 3] [--workers 0]

Reads the split's rows as `prd-jax eval` does (`tasks.get_task("codecontests").problems`, data
from `prd-jax data get codecontests`), keeps each problem's first `--per-problem` correct
solutions (`solutions`) in Python 3 (language 3, PYTHON3, in the dataset's enum) and grades
each, as a completion, with the task's real sandbox (`rewards.code`, all-pass on public +
private + generated tests) at `time_scale` = each factor. Prints per factor passed / total,
the status counts, and the ratio to the largest factor (the reference: a solution failing
there fails for a reason other than time), then one JSON line. The task's default
(`CodeContestsTask.time_scale`) must pass at least 95% of them (issue 45 §3).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import time

PYTHON3 = (3, "3", "PYTHON3", "python3")  # the dataset's Solution.Language enum value, as int or name


def python3_solutions(row: dict, per_problem: int) -> list:
    """The row's first `per_problem` correct Python 3 solutions (the published `solutions` column)."""
    block = row.get("solutions") or {}
    pairs = zip(block.get("language") or [], block.get("solution") or [])
    return [code for lang, code in pairs if lang in PYTHON3 and isinstance(code, str) and code.strip()][:per_problem]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="test", help="test (165 problems), valid (117) or train")
    ap.add_argument("--data-dir", default=None, help="data dir (default: $PRD_DATA_DIR, else the user data dir)")
    ap.add_argument("--factors", default="1,2,3,5", help="comma-separated time_scale values")
    ap.add_argument("--problems", type=int, default=0, help="first N problems (0: all)")
    ap.add_argument("--per-problem", type=int, default=3, help="Python 3 solutions per problem")
    ap.add_argument("--workers", type=int, default=0, help="problems graded at once (0: the task's default)")
    args = ap.parse_args()
    factors = sorted(float(f) for f in args.factors.split(","))
    if args.problems < 0 or args.per_problem < 1 or args.workers < 0 or not factors:
        ap.error("--problems >= 0, --per-problem >= 1, --workers >= 0 and at least one factor")

    from prd_jax.rewards.code import isolation
    from prd_jax.tasks import get_task

    base = get_task("codecontests")
    rows = base.problems(args.split, limit=args.problems or None, data_dir=args.data_dir)
    items = [(r, code) for r in rows for code in python3_solutions(r, args.per_problem)]
    print(f"{len(items)} Python 3 solutions of {len({r['id'] for r, _ in items})} problems "
          f"({len(rows)} rows in split {args.split!r}); sandbox {isolation()}; task default "
          f"time_scale={base.time_scale}")
    if not items:
        print("no Python 3 solutions in these rows: nothing to measure")
        return 1
    completions = [f"```python\n{code}\n```\n" for _, code in items]
    results = {}
    for factor in factors:
        task = base.options(time_scale=factor, workers=args.workers)
        start = time.perf_counter()
        grades = task.grade_many([r for r, _ in items], completions)
        results[factor] = {"passed": sum(g["correct"] for g in grades), "total": len(grades),
                           "statuses": dict(collections.Counter(g["status"] for g in grades)),
                           "seconds": round(time.perf_counter() - start, 1)}
    ref = results[factors[-1]]["passed"]
    print(f"| factor | passed / total | share | vs {factors[-1]:g}x | statuses | seconds |")
    print("|---|---|---|---|---|---|")
    for factor in factors:
        r = results[factor]
        ratio = f"{r['passed'] / ref:.3f}" if ref else "n/a"
        print(f"| {factor:g} | {r['passed']} / {r['total']} | {r['passed'] / r['total']:.3f} | {ratio} | "
              f"{r['statuses']} | {r['seconds']} |")
    print(json.dumps({"benchmark": "codecontests_time_limits", "split": args.split, "solutions": len(items),
                      "default_time_scale": base.time_scale, "results": {f"{f:g}": results[f] for f in factors},
                      "date": datetime.date.today().isoformat(), "machine": platform.platform(),
                      "cpus": os.cpu_count()}))
    default = results.get(float(base.time_scale))
    return 0 if default is None or default["passed"] >= 0.95 * default["total"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
