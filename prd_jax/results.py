"""Eval results as pandas DataFrames, and the comparison of several runs (docs/results.md).

    from prd_jax import results
    rows = results.load(["runs/pdr", "gs://bucket/runs/sr"])   # one row per (problem, operator, sample)
    calls = results.load_calls(["runs/pdr", "gs://bucket/runs/sr"])  # one row per model call

Rows and calls join on (workdir, run_id, problem_id, operator, sample). `compare(workdirs)` is
`prd-jax results`' table (operators x runs: mean@k and pass@k with 95% intervals, budgets),
computed from results.jsonl as `prd-jax eval` computes results.json; `average_runs` averages
operators over one run per benchmark. Nothing on the core import path imports this module
(it needs pandas: the `analysis` extra).
"""

from __future__ import annotations

import math
import os
from typing import Iterable, Union

import pandas as pd

from prd_jax import fileio, results_json
from prd_jax.evaluate import BUDGETS, summarize

PathOrPaths = Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]
KEY = ("problem_id", "operator", "sample")
CALL_FIELDS = ("name", "in_tokens", "out_tokens", "accepted")
RATING_FIELDS = ("candidate_a", "rating_a", "candidate_b", "rating_b")  # a judge call's `candidates` / `ratings`
CALL_COLUMNS = ("workdir", "run_id", "model", "task", *KEY, "call", *CALL_FIELDS, *RATING_FIELDS)


def _paths(paths: PathOrPaths) -> list:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = [os.fspath(p) for p in paths]
    if not out:
        raise ValueError("results.load: no workdir given; give an eval workdir or a list of them")
    return out


def _results_path(path: str) -> tuple:
    """(workdir, results.jsonl path) of a workdir or of its results.jsonl."""
    path = path.rstrip("/")
    if path.endswith(".jsonl"):
        return os.path.dirname(path), path
    return path, os.path.join(path, "results.jsonl")


def read_rows(path: str, latest: bool = True) -> list:
    """The result rows of one workdir (or results.jsonl), each with `workdir` set; `latest`
    keeps the last row per (problem, operator, sample), as the summary counts them (a retried
    request replaces its failed row)."""
    workdir, jsonl = _results_path(os.fspath(path))
    if not fileio.exists(jsonl):
        raise FileNotFoundError(f"{path}: no results.jsonl (is it a `prd-jax eval` workdir?)")
    rows = fileio.read_jsonl(jsonl)
    if latest:
        last = {}
        for r in rows:
            last[tuple(r.get(k) for k in KEY)] = r
        rows = list(last.values())
    return [dict(r, workdir=workdir) for r in rows]


def load(paths: PathOrPaths, *, latest: bool = True) -> pd.DataFrame:
    """One DataFrame row per results row of every workdir in `paths` (local or gs://).

    Columns: `workdir`, then the row's fields (`run_id`, `model`, `task`, `problem_id`,
    `operator`, `sample`, `correct`, `parsed`, the budgets, ...) with `calls` replaced by
    `num_calls`; `load_calls` has the calls. Rows written before run ids existed have
    run_id None. `latest=False` keeps failed rows that a rerun replaced."""
    records = []
    for path in _paths(paths):
        for r in read_rows(path, latest):
            calls = r.pop("calls", None)
            r.setdefault("run_id", None)
            r.setdefault("model", None)
            r["num_calls"] = len(calls) if calls is not None else 0
            records.append(r)
    frame = pd.DataFrame.from_records(records)
    first = [c for c in ("workdir", "run_id", "model", "task", *KEY) if c in frame.columns]
    return frame[first + [c for c in frame.columns if c not in first]]


def load_calls(paths: PathOrPaths, *, latest: bool = True) -> pd.DataFrame:
    """One DataFrame row per model call of the rows `load(paths)` returns: the row's key
    (`workdir`, `run_id`, `model`, `task`, `problem_id`, `operator`, `sample`), `call` (its
    index within the row: drafts, distill, refine, judge in the order the operator made
    them) and the call's `name`, `in_tokens`, `out_tokens` and `accepted` (on the accepted
    path: counts toward B_seq). A judge call's rated candidates and its 1..10 ratings fill
    `candidate_a` / `rating_a` (a pointwise `rating` call, or a pairwise `judge` call's
    candidate A) and `candidate_b` / `rating_b` (candidate B); other calls hold <NA> / NaN."""
    records = []
    for path in _paths(paths):
        for r in read_rows(path, latest):
            head = {c: r.get(c) for c in CALL_COLUMNS[:7]}
            for i, call in enumerate(r.get("calls") or ()):
                records.append({**head, "call": i, **{f: call.get(f) for f in CALL_FIELDS}, **_rated(call)})
    frame = pd.DataFrame.from_records(records, columns=list(CALL_COLUMNS))
    for side in ("a", "b"):
        frame[f"candidate_{side}"] = frame[f"candidate_{side}"].astype("Int64")
        frame[f"rating_{side}"] = frame[f"rating_{side}"].astype(float)
    return frame


def _rated(call: dict) -> dict:
    """A call record's `candidates` / `ratings` lists as the `RATING_FIELDS` columns."""
    cands, ratings = call.get("candidates") or [], call.get("ratings") or []
    out = {}
    for s, side in enumerate(("a", "b")):
        out[f"candidate_{side}"] = cands[s] if s < len(cands) else None
        rating = ratings[s] if s < len(ratings) else None
        out[f"rating_{side}"] = math.nan if rating is None else float(rating)
    return out


# ----------------------------------------------------------------------------- comparing runs

RUN_COLUMNS = ("run", "workdir", "model", "task", "run_ids", "operator", "problems", "k",
               "mean_at_k", "mean_at_k_lo", "mean_at_k_hi", "pass_at_k", "pass_at_k_lo", "pass_at_k_hi",
               *BUDGETS, "failed", "unparsed", "problems_dropped")


def parse_runs(specs) -> dict:
    """["WORKDIR" or "NAME=WORKDIR", ...] -> {NAME: WORKDIR}; an unnamed run is named by its
    workdir's last part (its whole path when two runs share that). A malformed or repeated
    name raises naming it."""
    named = []
    for spec in specs:
        spec = os.fspath(spec)
        name, eq, workdir = spec.partition("=")
        if not eq or "/" in name or ":" in name:  # a plain workdir (gs://b/x=1 stays a path)
            named.append((None, spec))
        elif not name or not workdir:
            raise ValueError(f"run {spec!r}: allowed forms WORKDIR or NAME=WORKDIR (e.g. lcb_v5=runs/lcb5)")
        else:
            named.append((name, workdir))
    if not named:
        raise ValueError("no runs given; give eval workdirs (WORKDIR or NAME=WORKDIR)")
    tails = [os.path.basename(w.rstrip("/")) for n, w in named if n is None]
    runs = {}
    for name, workdir in named:
        if name is None:
            tail = os.path.basename(workdir.rstrip("/"))
            name = tail if tails.count(tail) == 1 else workdir
        if name in runs:
            raise ValueError(f"run name {name!r} given twice; each run needs its own name")
        runs[name] = workdir
    return runs


def run_summary(workdir: str) -> list:
    """The results.json operator entries of a workdir, computed from its results.jsonl as
    `prd-jax eval` computes them (`evaluate.summarize`, `results_json.operator_entry`); each
    entry adds the run's `model`, `run_ids` and `workdir`."""
    rows = read_rows(workdir, latest=False)
    tasks = [r["task"] for r in rows if r.get("task")]
    models = [r["model"] for r in rows if r.get("model")]
    common = lambda xs: max(set(xs), key=xs.count) if xs else None
    run_ids = list(dict.fromkeys(r["run_id"] for r in rows if r.get("run_id")))
    return [dict(results_json.operator_entry(t, common(tasks)), model=common(models), run_ids=run_ids,
                 workdir=_results_path(workdir)[0]) for t in summarize(rows, detail=True)]


def compare(runs) -> pd.DataFrame:
    """One row per (run, operator) of the runs (`parse_runs` forms, or {name: workdir}):
    mean@k and pass@k with their 95% interval bounds, the mean budgets, failed and unparsed
    rows, over the problems every operator of that run answered (as summary.md)."""
    runs = runs if isinstance(runs, dict) else parse_runs([runs] if isinstance(runs, (str, os.PathLike)) else runs)
    records = []
    for name, workdir in runs.items():
        for e in run_summary(workdir):
            lo_m, hi_m = e["mean_at_k_ci95"] or (None, None)
            lo_p, hi_p = e["pass_at_k_ci95"] or (None, None)
            records.append({
                "run": name, "workdir": e["workdir"], "model": e["model"], "task": e["task"],
                "run_ids": ",".join(e["run_ids"]), "operator": e["operator"], "problems": e["problems"], "k": e["k"],
                "mean_at_k": e["mean_at_k"], "mean_at_k_lo": lo_m, "mean_at_k_hi": hi_m,
                "pass_at_k": e["pass_at_k"], "pass_at_k_lo": lo_p, "pass_at_k_hi": hi_p,
                **{b: e["budgets"][b]["mean"] for b in BUDGETS},
                "failed": e["counts"]["failed"], "unparsed": e["counts"]["unparsed"],
                "problems_dropped": e["counts"]["problems_dropped"]})
    frame = pd.DataFrame.from_records(records, columns=list(RUN_COLUMNS))
    order = {op: i for i, op in enumerate(dict.fromkeys(frame["operator"]))}
    run_order = {r: i for i, r in enumerate(runs)}
    return frame.sort_values(["operator", "run"], key=lambda c: c.map(order if c.name == "operator" else run_order),
                             kind="stable").reset_index(drop=True)


def _fmt(x, spec: str) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def compare_markdown(frame: pd.DataFrame) -> str:
    """The `compare` frame as markdown: operators x runs, mean@k [95% interval], pass@k, mean budgets."""
    lines = ["| operator | run | model | problems | k | mean@k [95% CI] | pass@k | B_seq | B_total | B_seq io "
             "| B_total io | failed | unparsed |", "|" + "---|" * 13]
    for r in frame.itertuples(index=False):
        ci = f" [{_fmt(r.mean_at_k_lo, '.3f')}, {_fmt(r.mean_at_k_hi, '.3f')}]" if r.mean_at_k_lo is not None \
            and not pd.isna(r.mean_at_k_lo) else ""
        lines.append(f"| {r.operator} | {r.run} | {r.model} | {r.problems} | {r.k} | {_fmt(r.mean_at_k, '.3f')}{ci} "
                     f"| {_fmt(r.pass_at_k, '.3f')} | {_fmt(r.b_seq, '.0f')} | {_fmt(r.b_total, '.0f')} "
                     f"| {_fmt(r.b_seq_io, '.0f')} | {_fmt(r.b_total_io, '.0f')} | {r.failed} | {r.unparsed} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- an average over runs

def average_runs(runs) -> list:
    """Each operator's mean@k averaged over runs, one run per benchmark: the V1 paper's
    "average accuracy on code-generation benchmarks" (arXiv 2603.04304 §4; the 64-call
    comparison of configs/eval/qwen3_4b_v1_matched_calls.py).

    Per operator (in order of first appearance): `runs` {name: {mean_at_k, problems, k,
    b_total}} (each run as `compare` reports it), `missing` (runs without the operator),
    `mean` (unweighted mean of the runs' mean@k: every benchmark weighs the same, the usual
    reading; the paper does not say), `pooled` (weighted by problems) and `b_total`
    (unweighted mean of the runs' mean B_total); the three are nan when `missing` is not empty."""
    runs = runs if isinstance(runs, dict) else parse_runs(runs)
    if not runs:
        raise ValueError("average_runs: no runs given; give {name: eval workdir}, one per benchmark")
    frame, names = compare(runs), list(runs)
    nan = float("nan")
    out = []
    for op in dict.fromkeys(frame["operator"]):
        mine = frame[frame["operator"] == op]
        per_run = {r.run: {"mean_at_k": r.mean_at_k, "problems": int(r.problems), "k": int(r.k), "b_total": r.b_total}
                   for r in mine.itertuples(index=False)}
        missing = [n for n in names if n not in per_run]
        problems = sum(r["problems"] for r in per_run.values())
        out.append({
            "operator": op, "runs": per_run, "missing": missing,
            "mean": nan if missing else sum(r["mean_at_k"] for r in per_run.values()) / len(per_run),
            "pooled": nan if missing or not problems else
            sum(r["mean_at_k"] * r["problems"] for r in per_run.values()) / problems,
            "b_total": nan if missing else sum(r["b_total"] for r in per_run.values()) / len(per_run)})
    return out


def average_frame(table: list, names) -> pd.DataFrame:
    """`average_runs` as a frame: per operator, each run's mean@k and problems, then the averages."""
    records = []
    for t in table:
        rec = {"operator": t["operator"]}
        for n in names:
            r = t["runs"].get(n)
            rec[f"{n}_mean_at_k"], rec[f"{n}_problems"] = (r["mean_at_k"], r["problems"]) if r else (None, None)
        records.append({**rec, "mean": t["mean"], "pooled": t["pooled"], "b_total": t["b_total"]})
    return pd.DataFrame.from_records(records)


def average_markdown(table: list, names) -> str:
    """`average_runs` as markdown: one column of mean@k (problems) per run, then the averages."""
    head = "| operator | " + " | ".join(f"{n} mean@k (problems)" for n in names) + \
        " | mean over runs | pooled over problems | mean B_total |"
    lines = [head, "|---|" + "---|" * (len(names) + 3)]
    for t in table:
        cells = [f"{t['runs'][n]['mean_at_k']:.3f} ({t['runs'][n]['problems']})" if n in t["runs"] else "missing"
                 for n in names]
        lines.append(f"| {t['operator']} | " + " | ".join(cells) +
                     f" | {_fmt(t['mean'], '.3f')} | {_fmt(t['pooled'], '.3f')} | {_fmt(t['b_total'], '.0f')} |")
    return "\n".join(lines)


def main(args) -> None:
    """`prd-jax results RUN... [--average] [--csv FILE] [--json]`: print the comparison (or the
    average over runs) as markdown, or as JSON records with --json; --csv also writes it."""
    runs = parse_runs(args.runs)
    if args.average:
        table = average_runs(runs)
        frame, text = average_frame(table, list(runs)), average_markdown(table, list(runs))
    else:
        frame = compare(runs)
        text = compare_markdown(frame)
    if args.csv:
        with fileio.open(args.csv, "w") as f:
            frame.to_csv(f, index=False)
    print(frame.to_json(orient="records") if args.json else text)
