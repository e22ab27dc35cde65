"""Problem rows of a task's seqio data, as python dicts (the one place tasks load data).

`read_rows(seqio_task, split)` calls the data layer's `prd_jax.data.seqio_rows.read` when that
module exists (seqio is the one data path, issue 14 §4). It is imported lazily, here only,
so TensorFlow stays out of the import path of the model, sampler, operators and train step.

`_read_jsonl_rows` is a PRIVATE STAND-IN for the builtin tasks while `seqio_rows` does not
exist: it reads the same JSONL sources from the data dir (`PRD_DATA_DIR`) and returns rows
with the fields the contract names (math: id, problem, answer; humaneval: task_id, prompt,
canonical_solution, test, entry_point plus id / problem / answer). Remove it once every
checkout has `seqio_rows`.
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Optional

from prd_jax.data import paths, seqio_rows

__all__ = ["read_rows", "source"]

# seqio task -> {split: JSONL path under the data dir} (the stand-in's table only).
_JSONL = {
    "prd_gsm8k": {"train": "math/gsm8k_train.jsonl", "test": "math/gsm8k_test.jsonl"},
    "prd_math500": {"test": "math/math500.jsonl"},
    "prd_aime2024": {"test": "math/aime2024.jsonl"},
    "prd_aime2025": {"test": "math/aime2025.jsonl"},
    "prd_humaneval": {"test": "code/humaneval.jsonl"},
}


def source() -> str:
    """"seqio" when the data layer's `seqio_rows` is importable, else "jsonl" (the stand-in)."""
    return "seqio" if importlib.util.find_spec("prd_jax.data.seqio_rows") is not None else "jsonl"


def read_rows(name: str, split: str, *, limit: Optional[int] = None, data_dir: Optional[str] = None) -> list:
    """Rows of seqio task or mixture `name`, split `split`, at most `limit`, in source order."""
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit={limit!r}; allowed: None or an int >= 0")
    if source() == "seqio":
        return seqio_rows.read(name, split, limit=limit, data_dir=data_dir)
    return _read_jsonl_rows(name, split, limit=limit, data_dir=data_dir)


def _read_jsonl_rows(name: str, split: str, *, limit: Optional[int], data_dir: Optional[str]) -> list:
    """PRIVATE STAND-IN for `seqio_rows.read` (see the module docstring)."""
    if name not in _JSONL:
        raise ValueError(f"seqio task {name!r} has no JSONL stand-in; allowed: {sorted(_JSONL)} "
                         "(other tasks need prd_jax.data.seqio_rows)")
    if split not in _JSONL[name]:
        raise ValueError(f"split={split!r} of {name!r}; allowed: {sorted(_JSONL[name])}")
    path = os.path.join(paths.data_dir(data_dir), *_JSONL[name][split].split("/"))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{name} ({split}): expected file {path} not found; set PRD_DATA_DIR")
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(rows) >= limit:
                break
            if not line.strip():
                continue
            row = json.loads(line)
            if "task_id" in row:  # a code problem: add the convenience fields
                for key in ("task_id", "prompt", "test", "entry_point"):
                    if not isinstance(row.get(key), str):
                        raise ValueError(f"{path}:{lineno}: field {key!r} must be a string")
                row = dict(row, id=row["task_id"], problem=row["prompt"], answer=row["task_id"])
            for key in ("id", "problem", "answer"):
                if key not in row:
                    raise ValueError(f"{path}:{lineno}: missing field {key!r}")
            rows.append(row)
    return rows
