"""Synthetic modular-arithmetic families `modchain` and `modinverse` (`prd_jax.data.synthetic`).

Graded like math (boxed final answer, exact equivalence); prompts use the "compact"
template set the tiny demo models are trained on. `problems` draws them deterministically
(`synthetic.generate`, seed 0 for "train" and 1 for "test"), so they need no data dir.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from prd_jax.data import synthetic
from prd_jax.tasks.base import register_task
from prd_jax.tasks.math import MathTask

__all__ = ["SyntheticTask", "MODCHAIN", "MODINVERSE"]

SPLIT_SEEDS = {"train": 0, "test": 1}


@dataclasses.dataclass(frozen=True)
class SyntheticTask(MathTask):
    """One synthetic family; `difficulty` is the tuple of chain lengths drawn from."""

    family: str = "modchain"
    difficulty: tuple = (1, 2, 3)
    num_problems: int = 512

    def problems(self, split: Optional[str] = None, limit: Optional[int] = None,
                 data_dir: Optional[str] = None) -> list:
        split = split or self.default_split
        if split not in SPLIT_SEEDS:
            raise ValueError(f"split={split!r} of task {self.name!r}; allowed: {sorted(SPLIT_SEEDS)}")
        n = self.num_problems if limit is None else limit
        return synthetic.generate(n, SPLIT_SEEDS[split], self.difficulty, family=self.family)


MODCHAIN = register_task(SyntheticTask("modchain", seqio_task="prd_synthetic_modchain", templates="compact",
                                       family="modchain"))
MODINVERSE = register_task(SyntheticTask("modinverse", seqio_task="prd_synthetic_modinverse", templates="compact",
                                         family="modinverse"))
