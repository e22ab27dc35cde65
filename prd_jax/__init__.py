"""prd_jax: LLMs as improvement operators (PDR / SR, arXiv 2510.01123; V1, arXiv 2603.04304)."""

__version__ = "0.1.0"
