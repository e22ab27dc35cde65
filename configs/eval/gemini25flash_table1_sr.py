"""PDR paper Table 1 (arXiv 2510.01123 §4.1) with gemini-2.5-flash through Gemini's
OpenAI-compatible API: Sequential Refinement with and without error analysis on AIME 2024 or
AIME 2025.

Rows (`api_rows.table1`): SR with 2 refinement rounds of 8k tokens per call, without and
with error analysis (the refine prompt first asks what is wrong with the previous answer).
mean@16 over the year's 30 problems, T = 1.0, top-p 1.0 (paper); the rounds and the
per-call budget are ours.

Backend: gemini-2.5-flash (Gemini's OpenAI-compatible endpoint, chat, each call's budget as its thinking budget); the key is read from GEMINI_API_KEY. Endpoint, token knobs,
tokenizer, resume and cost notes: configs/eval/api_rows.py.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export GEMINI_API_KEY=...
    prd-jax eval --config configs/eval/gemini25flash_table1_sr.py:aime2024 \
        --workdir runs/gemini25flash_table1_sr_aime2024
    prd-jax eval --config configs/eval/gemini25flash_table1_sr.py:aime2025 \
        --workdir runs/gemini25flash_table1_sr_aime2025

Expected (paper, §4.1 and Table 1): "Adding error analysis before solution generation
improves SR performance for o3-mini but not for gemini-2.5-flash"; here, for gemini-2.5-flash,
error analysis does not help. The table's values are not in papers/ (the paper gives no figure
we could quote); ours: not yet run.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("aime2024", "aime2025")  # the AIME year; none given: aime2024


def get_config(arg=None):
    return load_config(f"{os.path.join(HERE, 'api_rows.py')}:gemini25flash,table1,{arg or 'aime2024'}")
