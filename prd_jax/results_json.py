"""`results.json`: the machine-readable summary `prd-jax eval` writes beside summary.md.

It holds, per task and operator, mean@k and pass@k with 95% intervals, the budgets' mean,
median and 90th percentile, the failed / unparsed counts, and the run's identity (model,
checkpoint, resolved config, package version, git commit, start and end time in UTC,
hardware). Like lm-evaluation-harness's results files, a score sits beside its standard error
and the sample counts, and the file names the code and config that made it (docs/results.md).

Intervals are over problems, the unit the benchmarks sample (no resampling, no seed):
- mean@k: normal interval, mean ± 1.96 s / sqrt(n) with s the sample standard deviation
  (ddof 1) of the n per-problem means (summary.md's ± ci95), clipped to [0, 1];
- pass@k: Wilson score interval (z = 1.96) of the share of the n problems solved.
Quantiles are numpy's default (linear interpolation) over the compared rows (one per sample).

Run ids: each `evaluate` invocation draws one (`new_run_id`) and stamps every row it writes
with it; a resumed run keeps the rows and run ids of earlier invocations, and results.json
lists them all (`run_ids`, `invocations`).
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import math
import os
import socket
import subprocess
import uuid
from typing import Optional

import jax
import numpy as np

from prd_jax import fileio

SCHEMA = "prd_jax.results/1"
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
QUANTILES = {"p50": 50, "p90": 90}
CI_METHOD = {"level": 0.95,
             "mean_at_k": "normal over problems: mean +- 1.96 * std(per-problem means, ddof=1) / sqrt(n), "
                          "clipped to [0, 1]",
             "pass_at_k": "Wilson score interval over problems, z = 1.96",
             "quantiles": "numpy.percentile (linear) over the compared rows"}


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (2025-01-31T12:00:00+00:00)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    """A fresh id for one eval invocation: UTC time plus 8 random hex digits (20250131T120000Z-1a2b3c4d)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + uuid.uuid4().hex[:8]


def normal_ci(values) -> tuple:
    """(stderr, (low, high)) of the mean of `values` (per-problem means), clipped to [0, 1];
    (None, None) for fewer than two values."""
    n = len(values)
    if n < 2:
        return None, None
    mean = float(np.mean(values))
    stderr = float(np.std(values, ddof=1) / math.sqrt(n))
    return stderr, (max(0.0, mean - Z95 * stderr), min(1.0, mean + Z95 * stderr))


def wilson_ci(successes: int, n: int, z: float = Z95) -> Optional[tuple]:
    """Wilson score interval of a proportion successes / n; None when n is 0."""
    if n == 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def budget_stats(values) -> dict:
    """mean, p50 and p90 of one budget over rows; None each when there are no rows."""
    if not len(values):
        return {"mean": None, **{q: None for q in QUANTILES}}
    return {"mean": float(np.mean(values)), **{q: float(np.percentile(values, p)) for q, p in QUANTILES.items()}}


def _num(x):
    """JSON has no NaN: nan -> None."""
    return None if isinstance(x, float) and math.isnan(x) else x


def operator_entry(t: dict, task: str) -> dict:
    """One results.json operator entry from a `summarize(rows, detail=True)` row."""
    d = t["detail"]
    stderr, ci = normal_ci(d["per_problem"])
    solved = int(sum(d["solved"]))
    entry = {
        "task": task, "operator": t["operator"], "problems": t["problems"], "k": t["k"],
        "rows": d["rows"],
        "mean_at_k": _num(t["mean_at_k"]), "mean_at_k_stderr": stderr,
        "mean_at_k_ci95": list(ci) if ci else None,
        "pass_at_k": _num(t["pass_at_k"]), "pass_at_k_ci95": (lambda c: list(c) if c else None)(
            wilson_ci(solved, len(d["solved"]))),
        "budgets": {b: budget_stats(v) for b, v in d["budgets"].items()},
        "counts": {"failed": t["failed"], "unparsed": t["parse_failures"], "truncations": t["truncations"],
                   "judge_unparsed": t["judge_unparsed"], "skipped": t["skipped"],
                   "problems_dropped": t["problems_dropped"]},
    }
    if "remote" in t:
        entry["remote"] = t["remote"]
    return entry


def package_version() -> Optional[str]:
    """The installed prd_jax version (importlib.metadata), or None when not installed."""
    try:
        return importlib.metadata.version("prd_jax")
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> Optional[dict]:
    """{"commit", "dirty"} of the git checkout holding this prd_jax source tree, or None (an
    installed wheel, no git, a checkout of something else): best effort, never raises."""
    package = os.path.dirname(os.path.abspath(__file__))
    git = lambda *a: subprocess.run(["git", "-C", package, *a], capture_output=True, text=True, timeout=10)
    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode or os.path.realpath(os.path.join(top.stdout.strip(), "prd_jax")) != os.path.realpath(package):
            return None
        commit = git("rev-parse", "HEAD")
        if commit.returncode:
            return None
        status = git("status", "--porcelain", "--untracked-files=no")
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip()) if not status.returncode else None}
    except (OSError, subprocess.SubprocessError):
        return None


def hardware() -> dict:
    """Where the eval ran (for a remote backend: the client, not the server)."""
    devices = jax.devices()
    return {"backend": jax.default_backend(), "device_kind": devices[0].device_kind if devices else None,
            "device_count": jax.device_count(), "process_count": jax.process_count(),
            "host": socket.gethostname()}


def config_json(config) -> dict:
    """The resolved config as JSON (as config.json holds it)."""
    if hasattr(config, "to_json_best_effort"):
        return json.loads(config.to_json_best_effort())
    return json.loads(json.dumps(dict(config), default=str))


def build(table: list, rows: list, *, task: str, model: str, checkpoint: str, config, run_id: str,
          started: str, finished: str, previous: Optional[dict] = None) -> dict:
    """The results.json record of an eval workdir. `table` is `summarize(rows, detail=True)`;
    `rows` the workdir's results rows (for their run ids); `previous` the workdir's old
    results.json (its invocations are kept)."""
    run_ids = list(dict.fromkeys(r["run_id"] for r in rows if r.get("run_id")))
    written = sum(r.get("run_id") == run_id for r in rows)
    invocations = [i for i in (previous or {}).get("invocations", []) if i.get("run_id") != run_id]
    invocations.append({"run_id": run_id, "started": started, "finished": finished, "rows_written": written})
    detail = next((t["detail"] for t in table if t["detail"]["compared"]), table[0]["detail"] if table else None)
    return {
        "schema": SCHEMA, "task": task, "model": model, "checkpoint": checkpoint or None,
        "run_id": run_id, "run_ids": run_ids, "invocations": invocations,
        "started": invocations[0]["started"], "finished": finished,
        "package": {"name": "prd_jax", "version": package_version()}, "git": git_commit(),
        "hardware": hardware(),
        "problems": {"compared": detail["compared"] if detail else [], "dropped": detail["dropped"] if detail else [],
                     "note": "scores and budgets are over the problems every operator answered"},
        "ci": CI_METHOD,
        "results": [operator_entry(t, task) for t in table],
        "config": config_json(config),
    }


def write(workdir: str, record: dict) -> None:
    """`workdir/results.json` (local or gs://)."""
    fileio.write_text(os.path.join(workdir, "results.json"), json.dumps(record, indent=1) + "\n")


def read_previous(workdir: str) -> Optional[dict]:
    """The workdir's results.json, or None when there is none (or it does not parse): the file
    is optional, so any read error (tf.errors.* on a URI; TF's ram:// even says a missing
    results.json exists beside results.jsonl) means none."""
    path = os.path.join(workdir, "results.json")
    try:
        return fileio.read_json(path) if fileio.exists(path) else None
    except Exception:  # noqa: BLE001
        return None
