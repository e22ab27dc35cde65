"""PDR paper Fig. 3 (arXiv 2510.01123 §4.1) with gemini-2.5-flash through Gemini's
OpenAI-compatible API: Long-CoT, SR and PDR at matched sequential budget B_seq on AIME 2024
or AIME 2025.

Rows (`api_rows.fig3`): Long-CoT at 8k / 16k / 24k / 32k / 48k (49,152) / 65,535 output
tokens (gemini-2.5-flash's output limit, thinking included; each call may think up to the
model's 24,576-token thinking cap: api_rows.py); SR with 2 refinement rounds and PDR (8, 4, 1)
at 8k and 16k per call; PDR (16, 8, 4, 1) at 8k and 12k per call, all with a shared top-2
ranked by the model itself (`self_pointwise`, up to 4k tokens per rating call); PDR (8, 4, 1)
with a global summary (kappa 2048) at 8k and 16k. The B_seq-49k point is the 16k-per-call
rows, PDR (16, 8, 4, 1) at 12k and Long-CoT at 49,152. B_seq counts the tokens billed on the
accepted path (§3.1), so accuracy is read off each row's measured B_seq, with Long-CoT
bracketing it. mean@16 over the year's 30 problems, T = 1.0, top-p 1.0 (paper). The budget
grid, the ranker's budget and kappa are ours.

Backend: gemini-2.5-flash (Gemini's OpenAI-compatible endpoint, chat, each call's budget as its thinking budget); the key is read from GEMINI_API_KEY. Endpoint, token knobs,
tokenizer, resume and cost notes: configs/eval/api_rows.py.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export GEMINI_API_KEY=...
    prd-jax eval --config configs/eval/gemini25flash_fig3_matched_bseq.py:aime2024 \
        --workdir runs/gemini25flash_fig3_matched_bseq_aime2024
    prd-jax eval --config configs/eval/gemini25flash_fig3_matched_bseq.py:aime2025 \
        --workdir runs/gemini25flash_fig3_matched_bseq_aime2025

Expected (paper, abstract): "iterative pipelines surpass single-pass baselines at matched
sequential budgets, with PDR delivering the largest gains (e.g., +11% on AIME 2024 and +9%
on AIME 2025)" (that sentence names no model). For gemini-2.5-flash's own points the paper
gives no figure in papers/ (its Fig. 3 values there are o3-mini's:
configs/eval/o3mini_fig3_matched_bseq.py). Ours: not yet run.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("aime2024", "aime2025")  # the AIME year; none given: aime2024


def get_config(arg=None):
    return load_config(f"{os.path.join(HERE, 'api_rows.py')}:gemini25flash,fig3,{arg or 'aime2024'}")
