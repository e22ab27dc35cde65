"""PDR paper Table 2 (arXiv 2510.01123 §4.1) with o3-mini through the OpenAI API: the distill
variants of PDR (global summary, shared top-k, per-sample top-k, random-k; k = 2) on AIME
2024 or AIME 2025.

Rows (`api_rows.table2`): PDR (8, 4, 1), k = 2, 16k tokens per call, one row per distill
variant: global summary (kappa 2048), shared top-k and per-sample top-k (ranked by the model
itself, `self_pointwise`, up to 4k tokens per rating call) and random-k (each refine call
draws its own 2 drafts). mean@16 over the year's 30 problems, T = 1.0, top-p 1.0 (paper);
the per-call budget, kappa and the ranker's budget are ours.

Backend: o3-mini (OpenAI API, chat, max_completion_tokens, no temperature / top-p); the key is read from OPENAI_API_KEY. Endpoint, token knobs,
tokenizer, resume and cost notes: configs/eval/api_rows.py.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export OPENAI_API_KEY=...
    prd-jax eval --config configs/eval/o3mini_table2_distill.py:aime2024 \
        --workdir runs/o3mini_table2_distill_aime2024
    prd-jax eval --config configs/eval/o3mini_table2_distill.py:aime2025 \
        --workdir runs/o3mini_table2_distill_aime2025

Expected (paper, §4.1 and Table 2): "for o3-mini on AIME 2025, global summary outperforms";
the margins between the variants widen at larger thinking budgets. The table's values we
could not verify; ours: not yet run. The in-graph counterpart, over a budget ladder on both
years, is configs/eval/pdr_distill_variants.py.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("aime2024", "aime2025")  # the AIME year; none given: aime2024


def get_config(arg=None):
    return load_config(f"{os.path.join(HERE, 'api_rows.py')}:o3mini,table2,{arg or 'aime2024'}")
