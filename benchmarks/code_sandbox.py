"""Code-sandbox throughput on HumanEval's canonical solutions (`rewards.code.evaluate_many`).

    python benchmarks/code_sandbox.py [--limit 164] [--workers 0]

Runs every canonical solution (prompt + canonical_solution, rows as `tasks.get_task("humaneval")`
reads them) against its tests twice: with `evaluate_many`'s bounded parallelism (the project
path, `--workers` 0 = its default min(items, CPUs, 16)) and one after another (`workers=1`, the
reference). Prints the isolation mode that ran (`rewards.code.isolation()`), programs/s of
each and the ratio, then one JSON line. Every program must pass all its tests (else exit 1).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=164, help="first N HumanEval problems")
    ap.add_argument("--workers", type=int, default=0, help="parallel sandboxes (0: evaluate_many's default)")
    args = ap.parse_args()
    if args.limit < 1 or args.workers < 0:
        ap.error(f"--limit={args.limit} must be >= 1 and --workers={args.workers} >= 0")

    from prd_jax.rewards import code as C
    from prd_jax.rewards.pool import default_workers
    from prd_jax.tasks import get_task

    rows = get_task("humaneval").problems(limit=args.limit)
    items = [{"program": r["prompt"] + r["canonical_solution"], "tests": r["test"], "entry_point": r["entry_point"]}
             for r in rows]
    mode = C.isolation()
    workers = args.workers or default_workers(len(items))
    timings = {}
    for name, w in (("parallel", workers), ("sequential", 1)):
        t0 = time.perf_counter()
        res = C.evaluate_many(items, workers=w)
        timings[name] = time.perf_counter() - t0
        bad = [(r["task_id"], x.status) for r, x in zip(rows, res) if not x.all_passed]
        if bad:
            print(f"{name}: {len(bad)} canonical solutions did not pass: {bad[:5]}")
            return 1
    rate = {k: len(items) / v for k, v in timings.items()}
    ratio = rate["parallel"] / rate["sequential"]
    print(f"isolation: {mode}; {len(items)} HumanEval canonical programs, {os.cpu_count()} CPUs")
    print("| path | workers | seconds | programs/s |\n|---|---|---|---|")
    print(f"| evaluate_many | {workers} | {timings['parallel']:.1f} | {rate['parallel']:.2f} |")
    print(f"| one after another (reference) | 1 | {timings['sequential']:.1f} | {rate['sequential']:.2f} |")
    print(f"ratio (parallel / sequential): {ratio:.2f}x")
    print(json.dumps({"date": datetime.date.today().isoformat(), "machine": platform.machine(),
                      "cpus": os.cpu_count(), "isolation": mode, "programs": len(items), "workers": workers,
                      "programs_per_s": round(rate["parallel"], 3),
                      "sequential_programs_per_s": round(rate["sequential"], 3), "ratio": round(ratio, 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
