"""Published benchmark files as python dicts, for tasks that read their publisher's files
(JSONL, JSON or parquet) rather than a declared `tasks.source` (JSONL per split, or seqio).

`read_published(patterns, data_dir)` reads a benchmark's files as their publisher ships them
(JSONL, JSON or parquet; LiveCodeBench, CodeContests, MathArena), from the data dir
(`data.paths`: the argument, `PRD_DATA_DIR`, or the user data dir; `prd-jax data get` fills it). Rows come back
exactly as the file holds them after JSON / parquet decoding.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Optional, Sequence

from prd_jax.data import paths

__all__ = ["read_published", "read_records"]

FORMATS = (".jsonl", ".json", ".parquet")


def read_records(path: str) -> list:
    """The records of one published file: JSONL (one object a line), JSON (a list of objects) or
    parquet (pyarrow; nested columns become dicts and lists). Raises ValueError naming the file."""
    path = os.fspath(path)
    if path.endswith(".parquet"):
        try:  # loaded here: importing the tasks should not pay for pyarrow
            import pyarrow.parquet as parquet
        except ImportError:  # pragma: no cover - pyarrow comes with the data layer
            raise ValueError(f"{path}: reading parquet needs pyarrow, which is not installed; convert the file "
                             "to JSONL or install pyarrow") from None
        return parquet.read_table(path).to_pylist()
    with open(path, encoding="utf-8") as f:
        if path.endswith(".json"):
            rows = json.load(f)
            if not isinstance(rows, list):
                raise ValueError(f"{path}: expected a JSON list of objects, got {type(rows).__name__}")
        else:
            rows = []
            for lineno, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: record {i} is a {type(row).__name__}, expected an object")
    return rows


def read_published(patterns: Sequence[str], data_dir: Optional[str] = None, *, what: str = "benchmark") -> list:
    """All records of the files matching the first of `patterns` (globs relative to the data dir,
    "/"-separated) that matches any file; files in sorted name order. FileNotFoundError naming the
    patterns, the data dir and `PRD_DATA_DIR` when none matches."""
    root = paths.data_dir(data_dir)
    for pattern in patterns:
        files = sorted(f for f in glob.glob(os.path.join(root, *pattern.split("/"))) if f.endswith(FORMATS))
        if files:
            return [row for f in files for row in read_records(f)]
    raise FileNotFoundError(f"{what}: no file matches {list(patterns)} under the data dir {root}; put the "
                            f"published files ({', '.join(FORMATS)}) there (`prd-jax data get NAME` fetches "
                            f"the built-in benchmarks), or set {paths.DATA_DIR_ENV} or data_dir")
