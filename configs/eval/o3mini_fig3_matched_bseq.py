"""PDR paper Fig. 3 (arXiv 2510.01123 §4.1) with o3-mini through the OpenAI API: Long-CoT, SR
and PDR at matched sequential budget B_seq on AIME 2024 or AIME 2025.

Rows (`api_rows.fig3`): Long-CoT at 8k / 16k / 24k / 32k completion tokens; SR with 2
refinement rounds; PDR (8, 4, 1) and (16, 8, 4, 1) with a shared top-2 ranked by the model
itself (`self_pointwise`, up to 4k tokens per rating call), and PDR (8, 4, 1) with a global
summary (kappa 2048); 8k tokens per SR / PDR call. B_seq counts the tokens billed on the
accepted path (§3.1), so accuracy is read off each row's measured B_seq, with Long-CoT
bracketing it. mean@16 over the year's 30 problems, T = 1.0, top-p 1.0 (paper). The
budget grid, the ranker's budget and kappa are ours.

Backend: o3-mini (OpenAI API, chat, max_completion_tokens, no temperature / top-p); the key is read from OPENAI_API_KEY. Endpoint, token knobs,
tokenizer, resume and cost notes: configs/eval/api_rows.py.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export OPENAI_API_KEY=...
    prd-jax eval --config configs/eval/o3mini_fig3_matched_bseq.py:aime2024 \
        --workdir runs/o3mini_fig3_matched_bseq_aime2024
    prd-jax eval --config configs/eval/o3mini_fig3_matched_bseq.py:aime2025 \
        --workdir runs/o3mini_fig3_matched_bseq_aime2025

Expected (paper, abstract): SR "provides performance superior to long CoT", and
"iterative pipelines surpass single-pass baselines at matched sequential budgets, with PDR
delivering the largest gains (e.g., +11% on AIME 2024 and +9% on AIME 2025)"
(that sentence names no model). A third-party summary of Fig. 3
(samot-gc.github.io/summaries-with-sam, "Rethinking Thinking") reads o3-mini on AIME 2024 at
a 24k sequential budget as 77.5% for Long-CoT against 86.5% for PDR; we could not check that
figure against the paper's own text. Ours: not yet run.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("aime2024", "aime2025")  # the AIME year; none given: aime2024


def get_config(arg=None):
    return load_config(f"{os.path.join(HERE, 'api_rows.py')}:o3mini,fig3,{arg or 'aime2024'}")
