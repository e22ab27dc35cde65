"""Eval results as pandas DataFrames, and the comparison of several runs (docs/results.md).

    from prd_jax import results
    rows = results.load(["runs/pdr", "gs://bucket/runs/sr"])   # one row per (problem, operator, sample)
    calls = results.load_calls(["runs/pdr", "gs://bucket/runs/sr"])  # one row per model call

Rows and calls join on (workdir, run_id, problem_id, operator, sample). Nothing on the core
import path imports this module (it needs pandas: the `analysis` extra).
"""

from __future__ import annotations

import os
from typing import Iterable, Union

import pandas as pd

from prd_jax import fileio

PathOrPaths = Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]
KEY = ("problem_id", "operator", "sample")
CALL_FIELDS = ("name", "in_tokens", "out_tokens", "accepted")
CALL_COLUMNS = ("workdir", "run_id", "model", "task", *KEY, "call", *CALL_FIELDS)


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
    path: counts toward B_seq)."""
    records = []
    for path in _paths(paths):
        for r in read_rows(path, latest):
            head = {c: r.get(c) for c in CALL_COLUMNS[:7]}
            for i, call in enumerate(r.get("calls") or ()):
                records.append({**head, "call": i, **{f: call.get(f) for f in CALL_FIELDS}})
    return pd.DataFrame.from_records(records, columns=list(CALL_COLUMNS))
