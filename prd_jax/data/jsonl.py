"""Read and validate benchmark JSONL files (one problem per line). No TensorFlow.

Every row must be a JSON object whose `id`, `problem` and `answer` are non-empty strings;
other keys (`solution`, `subject`, `level`, ...) are passed through unchanged. Blank lines are
skipped. Anything else raises ValueError naming `file:line` and the offending key.
"""

from __future__ import annotations

import json
import os
from typing import Iterator, Optional, Sequence

__all__ = ["REQUIRED_KEYS", "iter_json_objects", "iter_jsonl", "read_jsonl"]

REQUIRED_KEYS = ("id", "problem", "answer")


def _check_row(row: object, where: str, required: Sequence[str] = REQUIRED_KEYS) -> dict:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in required:
        if key not in row:
            raise ValueError(f"{where}: missing key {key!r} (required keys: {list(required)})")
        value = row[key]
        if not isinstance(value, str):
            raise ValueError(f"{where}: invalid key {key!r}: expected a string, "
                             f"got {type(value).__name__} {value!r:.80}")
        if not value.strip():
            raise ValueError(f"{where}: invalid key {key!r}: empty string")
    return row


def iter_json_objects(path: str | os.PathLike, required: Sequence[str], key: str,
                      limit: Optional[int] = None) -> Iterator[dict]:
    """Yield the JSON objects of `path` in file order, at most `limit` of them.

    Every `required` key must hold a non-empty string, and `key` (one of them) must be unique
    in the file. Raises ValueError naming `file:line` and the key on a malformed line.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or an int >= 0, got {limit!r}")
    if key not in required:
        raise ValueError(f"key={key!r} must be one of the required keys {list(required)}")
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
            row = _check_row(row, where, required)
            if row[key] in seen:
                raise ValueError(f"{where}: invalid key {key!r}: duplicate {key} {row[key]!r} "
                                 f"(first seen on line {seen[row[key]]})")
            seen[row[key]] = lineno
            yield row
            count += 1
            if limit is not None and count >= limit:
                return


def iter_jsonl(path: str | os.PathLike, limit: Optional[int] = None) -> Iterator[dict]:
    """Yield validated problem rows ({id, problem, answer, ...}) of `path` in file order, at
    most `limit` of them.

    Raises ValueError on a malformed line or on an `id` seen before in the file.
    """
    return iter_json_objects(path, REQUIRED_KEYS, "id", limit)


def read_jsonl(path: str | os.PathLike, limit: Optional[int] = None) -> list[dict]:
    """All validated rows of `path` (see `iter_jsonl`)."""
    return list(iter_jsonl(path, limit))
