"""Read and validate benchmark JSONL files (one problem per line). No TensorFlow.

Every row must be a JSON object whose `id`, `problem` and `answer` are non-empty strings;
other keys (`solution`, `subject`, `level`, ...) are passed through unchanged. Blank lines are
skipped. Anything else raises ValueError naming `file:line` and the offending key.
"""

from __future__ import annotations

import json
import os
from typing import Iterator, Optional

from prd_jax.data import paths

__all__ = ["REQUIRED_KEYS", "iter_jsonl", "read_jsonl", "read_problems"]

REQUIRED_KEYS = ("id", "problem", "answer")


def _check_row(row: object, where: str) -> dict:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in REQUIRED_KEYS:
        if key not in row:
            raise ValueError(f"{where}: missing key {key!r} (required keys: {list(REQUIRED_KEYS)})")
        value = row[key]
        if not isinstance(value, str):
            raise ValueError(f"{where}: invalid key {key!r}: expected a string, "
                             f"got {type(value).__name__} {value!r:.80}")
        if not value.strip():
            raise ValueError(f"{where}: invalid key {key!r}: empty string")
    return row


def iter_jsonl(path: str | os.PathLike, limit: Optional[int] = None) -> Iterator[dict]:
    """Yield validated rows of `path` in file order, at most `limit` of them.

    Raises ValueError on a malformed line or on an `id` seen before in the file.
    """
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or an int >= 0, got {limit!r}")
    path = os.fspath(path)
    seen: dict[str, int] = {}
    count = 0
    if limit == 0:
        return
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
            row = _check_row(row, where)
            if row["id"] in seen:
                raise ValueError(f"{where}: invalid key 'id': duplicate id {row['id']!r} "
                                 f"(first seen on line {seen[row['id']]})")
            seen[row["id"]] = lineno
            yield row
            count += 1
            if limit is not None and count >= limit:
                return


def read_jsonl(path: str | os.PathLike, limit: Optional[int] = None) -> list[dict]:
    """All validated rows of `path` (see `iter_jsonl`)."""
    return list(iter_jsonl(path, limit))


def read_problems(name: str, data_dir: Optional[str | os.PathLike] = None,
                  limit: Optional[int] = None) -> list[dict]:
    """Validated rows of benchmark `name` ("gsm8k_test", "math500", ...; see `paths.DATASETS`).

    Each row has string `id`, `problem`, `answer` plus whatever extra keys the file holds.
    `data_dir` defaults as in `paths.data_dir`. Raises ValueError for an unknown name or a
    malformed line, FileNotFoundError for a missing file.
    """
    return read_jsonl(paths.dataset_file(name, data_dir), limit)
