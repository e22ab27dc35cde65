"""Synthetic families (`prd_jax.data.synthetic`): `modchain` and `modinverse`, graded like math
(boxed final answer, exact equivalence), and `preimage` (issue 15's search task,
`data.preimage`), graded by the forward check: the boxed x is correct when its chain
really ends at the target (any such x, not only the gold one). Prompts use the "compact" template set the tiny demo models are trained
on. `problems` draws them deterministically (`synthetic.generate`, seed `seed` for "train" and
`seed + 1` for "test"; `difficulty`, `num_problems`), so they need no data dir; a training
config sets `seed` and `difficulty` from `config.seed` and `config.data.difficulty`
(`train.setup.training_task`).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from prd_jax.data import preimage, synthetic
from prd_jax.tasks.base import Task, register_task
from prd_jax.tasks.math import MathTask

__all__ = ["DrawnTask", "SyntheticTask", "PreimageTask", "MODCHAIN", "MODINVERSE", "PREIMAGE"]

SPLIT_SEEDS = {"train": 0, "test": 1}  # added to the task's `seed`


class DrawnTask:
    """`problems` of a synthetic family: `synthetic.generate` with the split's seed (a mixin of
    dataclass tasks with fields `family`, `difficulty`, `num_problems` and `seed`)."""

    def problems(self, split: Optional[str] = None, limit: Optional[int] = None,
                 data_dir: Optional[str] = None) -> list:
        split = split or self.default_split
        if split not in SPLIT_SEEDS:
            raise ValueError(f"split={split!r} of task {self.name!r}; allowed: {sorted(SPLIT_SEEDS)}")
        n = self.num_problems if limit is None else limit
        return synthetic.generate(n, self.seed + SPLIT_SEEDS[split], tuple(self.difficulty), family=self.family)


@dataclasses.dataclass(frozen=True)
class SyntheticTask(DrawnTask, MathTask):
    """One synthetic family; `difficulty` is the tuple of chain lengths drawn from."""

    family: str = "modchain"
    difficulty: tuple = (1, 2, 3)
    num_problems: int = 512
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class PreimageTask(DrawnTask, Task):
    """The preimage search family: reward 1 when the boxed x (`preimage.final_answer`)
    passes `preimage.check` (any valid x, not only the gold one); majority voting groups on x; the
    in-graph gold key is the problem text itself, so the oracle checks without a lookup."""

    family: str = preimage.FAMILY
    difficulty: tuple = (3, 4)
    num_problems: int = 512
    seed: int = 0
    templates: str = "compact"

    def extract(self, completion: str) -> Optional[str]:
        return preimage.final_answer(completion)

    def grade(self, row: dict, completion: str) -> dict:
        answer = self.extract(completion)
        correct = answer is not None and preimage.check(row["problem"], answer)
        return {"reward": float(correct), "correct": bool(correct), "parsed": answer is not None, "answer": answer}

    def answer_key(self, completion: str) -> Optional[str]:
        answer = self.extract(completion)
        try:
            return None if answer is None else str(int(answer))
        except ValueError:
            return answer

    def gold_key(self, row: dict) -> str:
        return str(row["problem"])

    def row_for_key(self, key: str, rows_by_key: dict) -> dict:
        return rows_by_key.get(key) or {"problem": key}


MODCHAIN = register_task(SyntheticTask("modchain", templates="compact", family="modchain"))
MODINVERSE = register_task(SyntheticTask("modinverse", templates="compact", family="modinverse"))
PREIMAGE = register_task(PreimageTask("preimage"))
