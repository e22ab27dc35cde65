"""Improvement operators (Long-CoT, SR, PDR), prompts, assembly and budgets (arXiv 2510.01123)."""

from prd_jax.operators.core import Context, OperatorResult, Problems, long_cot, pdr, run, sr
from prd_jax.operators.specs import PDR, SR, LongCoT, Sampling

__all__ = ["Context", "OperatorResult", "Problems", "long_cot", "pdr", "run", "sr", "PDR", "SR",
           "LongCoT", "Sampling"]
