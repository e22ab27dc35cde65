"""Improvement operators: Long-CoT, SR, PDR (arXiv 2510.01123), best-of-N with V1 selectors
and RSA (arXiv 2603.04304), prompts, assembly, judges and budgets."""

from prd_jax.operators.core import Context, OperatorResult, Problems, long_cot, pdr, sr
from prd_jax.operators.population import best_of_n, rsa
from prd_jax.operators.runner import run
from prd_jax.operators.specs import PDR, RSA, SR, BestOfN, Judge, LongCoT, Sampling

__all__ = ["Context", "OperatorResult", "Problems", "long_cot", "pdr", "run", "sr", "best_of_n", "rsa",
           "PDR", "RSA", "SR", "BestOfN", "Judge", "LongCoT", "Sampling"]
