"""Each operator's accuracy averaged over several eval runs, one run per benchmark: the V1
paper's "average accuracy on code-generation benchmarks" (arXiv 2603.04304 §4, the 64-call
comparison of `configs/eval/qwen3_4b_v1_matched_calls.py`), where `prd-jax eval` runs one
task per workdir.

`average_runs({name: workdir})` summarises each workdir's `results.jsonl` as `prd-jax eval`
does (`evaluate.summarize`: mean@k over the problems every operator of that run answered) and
returns, per operator, each run's mean@k and problem count, their unweighted mean (`mean`:
every benchmark weighs the same, the usual reading of an average over benchmarks; the paper
does not say) and the mean weighted by problems (`pooled`), and the unweighted mean of the
runs' mean B_total. An operator that some run lacks gets no averages (nan) and names the runs
it is missing from.

    python -m prd_jax.average_runs livecodebench_v5=runs/a livecodebench_v6=runs/b codecontests=runs/c

prints the table (markdown) and, with `--out FILE`, writes it there too.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Mapping, Optional, Sequence

from prd_jax import fileio
from prd_jax.evaluate import summarize


def run_table(workdir: str) -> list:
    """`evaluate.summarize` of a workdir's results.jsonl; a workdir without one raises naming it."""
    path = os.path.join(workdir, "results.jsonl")
    if not fileio.exists(path):
        raise FileNotFoundError(f"{workdir}: no results.jsonl (is it a `prd-jax eval` workdir?)")
    return summarize(fileio.read_jsonl(path))


def average_runs(workdirs: Mapping[str, str]) -> list:
    """Per operator (in order of first appearance): `runs` {name: {mean_at_k, problems, k,
    b_total}}, `missing` (run names without the operator), `mean` (unweighted mean of the runs'
    mean@k), `pooled` (weighted by problems) and `b_total` (unweighted mean of the runs' mean
    B_total); the three are nan when `missing` is not empty."""
    if not workdirs:
        raise ValueError("average_runs: no runs given; give {name: eval workdir}, one per benchmark")
    tables = {name: run_table(workdir) for name, workdir in workdirs.items()}
    operators = list(dict.fromkeys(t["operator"] for table in tables.values() for t in table))
    out = []
    for op in operators:
        runs = {name: {k: t[k] for k in ("mean_at_k", "problems", "k", "b_total")}
                for name, table in tables.items() for t in table if t["operator"] == op}
        missing = [name for name in tables if name not in runs]
        nan = float("nan")
        problems = sum(r["problems"] for r in runs.values())
        out.append({
            "operator": op, "runs": runs, "missing": missing,
            "mean": nan if missing else sum(r["mean_at_k"] for r in runs.values()) / len(runs),
            "pooled": nan if missing or not problems else
            sum(r["mean_at_k"] * r["problems"] for r in runs.values()) / problems,
            "b_total": nan if missing else sum(r["b_total"] for r in runs.values()) / len(runs),
        })
    return out


def markdown(table: list, names: Sequence[str]) -> str:
    """The table as markdown: one column of mean@k (problems) per run, then the averages."""
    head = "| operator | " + " | ".join(f"{n} mean@k (problems)" for n in names) + \
        " | mean over runs | pooled over problems | mean B_total |"
    lines = [head, "|---|" + "---|" * (len(names) + 3)]
    fmt = lambda x: "n/a" if math.isnan(x) else f"{x:.3f}"
    for t in table:
        cells = [f"{t['runs'][n]['mean_at_k']:.3f} ({t['runs'][n]['problems']})" if n in t["runs"] else "missing"
                 for n in names]
        b_total = "n/a" if math.isnan(t["b_total"]) else f"{t['b_total']:.0f}"
        lines.append(f"| {t['operator']} | " + " | ".join(cells) +
                     f" | {fmt(t['mean'])} | {fmt(t['pooled'])} | {b_total} |")
    return "\n".join(lines)


def parse_runs(specs: Sequence[str]) -> dict:
    """["NAME=WORKDIR", ...] -> {NAME: WORKDIR}; a malformed or repeated name raises naming it."""
    runs = {}
    for spec in specs:
        name, eq, workdir = spec.partition("=")
        if not eq or not name or not workdir:
            raise ValueError(f"run {spec!r}: allowed form NAME=WORKDIR (e.g. livecodebench_v5=runs/lcb5)")
        if name in runs:
            raise ValueError(f"run name {name!r} given twice; each run needs its own name")
        runs[name] = workdir
    return runs


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prd_jax.average_runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="NAME=WORKDIR", help="an eval workdir per benchmark")
    parser.add_argument("--out", default="", help="also write the markdown table to this file")
    args = parser.parse_args(argv)
    try:
        runs = parse_runs(args.runs)
        table = average_runs(runs)
    except (ValueError, FileNotFoundError) as e:
        parser.error(str(e))
    md = markdown(table, list(runs))
    print(md)
    if args.out:
        fileio.write_text(args.out, md + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
