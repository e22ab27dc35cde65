"""HMMT February 2025 (V1 arXiv 2603.04304 §4 reports it; math answers).

Data: MathArena's `hmmt_feb_2025` as published (one split, "train"; fields `problem_idx`,
`problem`, `answer`), read from the data dir: `math/hmmt_feb2025.jsonl` (or `.parquet`), or the
published parquet under `math/hmmt_feb_2025/` (also its `data/` subfolder); nothing is
downloaded. `problems` adds `id` (= `problem_idx`). Grading: the math tasks' grading
(`tasks.math.MathTask`: the final answer against `answer` by `rewards.math.is_equivalent`), so
`\\frac{1}{2}` and `0.5` are the same answer.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from prd_jax.tasks.base import register_task
from prd_jax.tasks.math import MathTask
from prd_jax.tasks.rows import read_published

__all__ = ["HMMT_FEB2025", "PublishedMathTask"]


@dataclasses.dataclass(frozen=True)
class PublishedMathTask(MathTask):
    """A math benchmark read from its published files (`data_patterns`, globs under the data dir)."""

    data_patterns: tuple = ()
    id_key: str = "problem_idx"
    splits: tuple = ("test", "train")  # names accepted for the one published split

    def problems(self, split: Optional[str] = None, limit: Optional[int] = None,
                 data_dir: Optional[str] = None) -> list:
        if (split or self.default_split) not in self.splits:
            raise ValueError(f"{self.name}: split={split!r}; allowed: {list(self.splits)} (the one published split)")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit={limit!r}; allowed: None or an int >= 0")
        rows = []
        for i, row in enumerate(read_published(self.data_patterns, data_dir, what=self.name)):
            for key in ("problem", "answer"):
                if row.get(key) is None or not str(row[key]).strip():
                    raise ValueError(f"{self.name}: record {i} has no {key!r}")
            rows.append(dict(row, id=str(row.get(self.id_key, i + 1))))
        return rows if limit is None else rows[:limit]


HMMT_FEB2025 = register_task(PublishedMathTask(
    "hmmt_feb2025", data_patterns=("math/hmmt_feb2025.*", "math/hmmt_feb_2025/*", "math/hmmt_feb_2025/data/*")))
