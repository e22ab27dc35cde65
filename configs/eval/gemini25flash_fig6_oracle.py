"""PDR paper Fig. 6 (arXiv 2510.01123 §4.1 and App. D.1) with gemini-2.5-flash through Gemini's
OpenAI-compatible API: oracle workspaces (correct-only / incorrect-only drafts) against
random-k on AIME 2024 or AIME 2025.

Rows (`api_rows.fig6`): PDR (8, 4, 1), 8k tokens per call, whose shared top-2 workspace
admits only the drafts the grader marks correct (`oracle_correct`) or incorrect
(`oracle_incorrect`), against random-k (k = 2). Fewer than k admitted drafts leave a smaller
workspace; none leaves the problem alone. mean@16 over the year's 30 problems, T = 1.0,
top-p 1.0 (paper); the per-call budget is ours.

Backend: gemini-2.5-flash (Gemini's OpenAI-compatible endpoint, chat, each call's budget as its thinking budget); the key is read from GEMINI_API_KEY. Endpoint, token knobs,
tokenizer, resume and cost notes: configs/eval/api_rows.py.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export GEMINI_API_KEY=...
    prd-jax eval --config configs/eval/gemini25flash_fig6_oracle.py:aime2024 \
        --workdir runs/gemini25flash_fig6_oracle_aime2024
    prd-jax eval --config configs/eval/gemini25flash_fig6_oracle.py:aime2025 \
        --workdir runs/gemini25flash_fig6_oracle_aime2025

Expected (paper, §4.1 and App. D.1): correct-only workspaces "improve over Random-k". For
the incorrect-only rows and for gemini-2.5-flash's values the paper gives no figure we could
verify; ours: not yet run. The in-graph counterpart is configs/eval/pdr_oracle_workspaces.py.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("aime2024", "aime2025")  # the AIME year; none given: aime2024


def get_config(arg=None):
    return load_config(f"{os.path.join(HERE, 'api_rows.py')}:gemini25flash,fig6,{arg or 'aime2024'}")
