"""Math task families: gsm8k, math500, aime2024, aime2025 (PDR arXiv 2510.01123 §4; V1 arXiv 2603.04304 §4).

Artifact: the final answer (`rewards.math.extract_answer`: last `\\boxed{}`, "the answer is",
`####`, last number). Reward: 1.0 when it is equivalent to the gold answer under
`rewards.math.is_equivalent` (math-verify), else 0.0; the oracle is the same grade; majority
voting groups on the normalised answer (`rewards.math.normalize_answer`). Prompts: the
"default" template set, judges `pairwise_math` / `pointwise_math`. Data: each task's JSONL
files under the data dir (`tasks.source.JsonlFiles`), e.g. `math/gsm8k_train.jsonl` for gsm8k's
"train" split.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from prd_jax.rewards.math import extract_answer, grade_detailed, normalize_answer
from prd_jax.rewards.pool import parallel_map
from prd_jax.tasks.base import Task, register_task
from prd_jax.tasks.source import JsonlFiles

__all__ = ["MathTask", "GSM8K", "MATH500", "AIME2024", "AIME2025"]


@dataclasses.dataclass(frozen=True)
class MathTask(Task):
    """A math benchmark graded by final-answer equivalence."""

    timeout_s: float = 2.0  # math-verify wall-clock limit per symbolic comparison
    last_number_fallback: bool = True

    def extract(self, completion: str) -> Optional[str]:
        return extract_answer(completion, last_number_fallback=self.last_number_fallback)

    def grade(self, row: dict, completion: str) -> dict:
        g = grade_detailed(completion, str(row["answer"]), last_number_fallback=self.last_number_fallback,
                           timeout_s=self.timeout_s)
        return {"reward": float(g["correct"]), "correct": bool(g["correct"]), "parsed": bool(g["parsed"]),
                "answer": g["answer"]}

    def grade_many(self, rows: Sequence[dict], completions: Sequence[str]) -> list:
        if len(rows) != len(completions):
            raise ValueError(f"grade_many: {len(rows)} rows but {len(completions)} completions")
        return parallel_map(lambda rc: self.grade(*rc), list(zip(rows, completions)))

    def answer_key(self, completion: str) -> Optional[str]:
        answer = self.extract(completion)
        return None if answer is None else normalize_answer(answer)


# GSM8K, MATH-500 and AIME 2024 publish a worked solution per problem: SFT trains on it
# (`Task.sft_target`), so their files must carry it. AIME 2025's release has none.
WITH_SOLUTION = ("id", "problem", "answer", "solution")
GSM8K = register_task(MathTask("gsm8k", source=JsonlFiles({"train": "math/gsm8k_train.jsonl",
                                                              "test": "math/gsm8k_test.jsonl"},
                                                             fields=WITH_SOLUTION)))
MATH500 = register_task(MathTask("math500", source=JsonlFiles({"test": "math/math500.jsonl"}, fields=WITH_SOLUTION)))
AIME2024 = register_task(MathTask("aime2024", source=JsonlFiles({"test": "math/aime2024.jsonl"},
                                                                fields=WITH_SOLUTION)))
AIME2025 = register_task(MathTask("aime2025", source=JsonlFiles({"test": "math/aime2025.jsonl"})))
