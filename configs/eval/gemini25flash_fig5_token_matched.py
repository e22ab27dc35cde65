"""PDR paper Fig. 5 (arXiv 2510.01123 §4.1), the token-matched comparison, with gemini-2.5-flash through
Gemini's OpenAI-compatible API: SR against PDR at equal total tokens B_total on AIME 2024 or AIME 2025.

Rows (`api_rows.fig5`): SR at 8k tokens per call with 2, 4, 6, 8 and 12 refinement rounds
(3..13 calls, all on the accepted path: B_seq = B_total), and PDR (8, 4, 1) at 8k per call
(13 generation calls, 3 of them on the path) with a global summary (kappa 2048) and with a
shared top-2 ranked by the model itself (`self_pointwise`). The SR ladder spans PDR's B_total,
so the comparison reads, at PDR's B_total, the SR rung of equal accuracy and the ratio of
their B_seq (`b_seq`; `b_seq_no_judge` leaves the rating calls out). mean@16 over the year's 30
problems, T = 1.0, top-p 1.0 (paper); the rounds, budgets and kappa are ours.

Backend: gemini-2.5-flash (Gemini's OpenAI-compatible endpoint, chat, thinking capped at 24,576 tokens per call);
the key is read from GEMINI_API_KEY. Endpoint, token knobs, tokenizer, resume and cost
notes: configs/eval/api_rows.py.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export GEMINI_API_KEY=...
    prd-jax eval --config configs/eval/gemini25flash_fig5_token_matched.py:aime2024 \\
        --workdir runs/gemini25flash_fig5_token_matched_aime2024
    prd-jax eval --config configs/eval/gemini25flash_fig5_token_matched.py:aime2025 \\
        --workdir runs/gemini25flash_fig5_token_matched_aime2025

Expected (paper, §4.1 and Fig. 5): "at equal total tokens, PDR matches SR accuracy with a 2.57×
smaller sequential budget" (that sentence names no model;
for gemini-2.5-flash the paper gives no figure in papers/). Ours: not yet run.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("aime2024", "aime2025")  # the AIME year; none given: aime2024


def get_config(arg=None):
    return load_config(f"{os.path.join(HERE, 'api_rows.py')}:gemini25flash,fig5,{arg or 'aime2024'}")
