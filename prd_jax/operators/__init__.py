"""Improvement operators: Long-CoT, SR, PDR (arXiv 2510.01123), best-of-N with V1 selectors
and RSA (arXiv 2603.04304), adaptive PDR (ours), assembly, judges and budgets.

Each operator is one module holding its spec class and its run function, registered with
`registry.register_operator` when the module is imported; importing this package imports
every built-in one. Prompts live in the JAX-free `prd_jax.prompts`."""

from prd_jax.operators.core import Context, OperatorResult, Problems
from prd_jax.operators.long_cot import LongCoT, long_cot
from prd_jax.operators.sr import SR, sr
from prd_jax.operators.pdr import PDR, pdr
from prd_jax.operators.best_of_n import BestOfN, best_of_n
from prd_jax.operators.rsa import RSA, rsa
from prd_jax.operators.adaptive_pdr import AdaptivePDR, adaptive_pdr
from prd_jax.operators.registry import build_spec, get_operator, operator_for, operator_names, register_operator
from prd_jax.operators.runner import run
from prd_jax.operators.specs import Judge, OperatorSpec, Sampling

__all__ = ["Context", "OperatorResult", "Problems", "run", "LongCoT", "long_cot", "SR", "sr", "PDR", "pdr",
           "BestOfN", "best_of_n", "RSA", "rsa", "AdaptivePDR", "adaptive_pdr", "Judge", "OperatorSpec",
           "Sampling", "build_spec", "get_operator", "operator_for", "operator_names", "register_operator"]
