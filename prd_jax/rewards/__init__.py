"""Reward functions (verifiable rewards for PDR / V1): `math` (math-verify), `code` (sandboxed
execution) and `pool` (the subprocess machinery both share)."""

from prd_jax.rewards.math import (
    extract_answer,
    grade,
    grade_detailed,
    is_equivalent,
    normalize_answer,
)

__all__ = ["extract_answer", "grade", "grade_detailed", "is_equivalent", "normalize_answer"]
