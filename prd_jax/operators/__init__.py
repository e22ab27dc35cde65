"""Improvement operators: Long-CoT, SR, PDR (arXiv 2510.01123), best-of-N with V1 selectors
and RSA (arXiv 2603.04304), assembly, judges and budgets. Each operator registers itself
(`registry.register_operator`); prompts live in the JAX-free `prd_jax.prompts`."""

from prd_jax.operators.core import Context, OperatorResult, Problems, long_cot, pdr, sr
from prd_jax.operators.population import best_of_n, rsa
from prd_jax.operators.adaptive_pdr import AdaptivePDR, adaptive_pdr  # registers "adaptive_pdr"
from prd_jax.operators.registry import build_spec, get_operator, operator_for, operator_names, register_operator
from prd_jax.operators.runner import run
from prd_jax.operators.specs import PDR, RSA, SR, BestOfN, Judge, LongCoT, OperatorSpec, Sampling

__all__ = ["Context", "OperatorResult", "Problems", "long_cot", "pdr", "run", "sr", "best_of_n", "rsa",
           "PDR", "RSA", "SR", "BestOfN", "Judge", "LongCoT", "OperatorSpec", "Sampling", "build_spec",
           "get_operator", "operator_for", "operator_names", "register_operator"]
