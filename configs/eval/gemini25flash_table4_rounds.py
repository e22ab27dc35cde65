"""PDR paper Table 4 / App. E (arXiv 2510.01123) with gemini-2.5-flash, the model App. E analyses,
through Gemini's OpenAI-compatible API: PDR with 4 rounds against 5 rounds at the higher compute,
on AIME 2024 or AIME 2025.

Rows (`api_rows.table4`): PDR (16, 8, 4, 1), 4 rounds, and (32, 16, 8, 4, 1), 5 rounds, both
with a shared top-2 ranked by the model itself (`self_pointwise`, up to 4k tokens per rating
call), 8k tokens per call. App. E: "the higher-compute setting uses 32 first-round
generations" (M_1 = 32, the paper's); the 4-round schedule's M_1 = 16 and every later round
size are ours, as is the per-call budget. Per-question accuracy (Table 4 reports it per
question) is in results.jsonl, one row per problem and sample; which four AIME problems the
paper's Q1-Q4 are is not in papers/. mean@16, T = 1.0, top-p 1.0 (paper).

Backend: gemini-2.5-flash (Gemini's OpenAI-compatible endpoint, chat, thinking capped at 24,576
tokens per call); the key is read from GEMINI_API_KEY. Endpoint, token knobs, tokenizer, resume
and cost notes: configs/eval/api_rows.py. The in-graph counterpart on Qwen3-8B is
configs/eval/pdr_rounds.py.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export GEMINI_API_KEY=...
    prd-jax eval --config configs/eval/gemini25flash_table4_rounds.py:aime2024 \\
        --workdir runs/gemini25flash_table4_rounds_aime2024

Expected (paper, App. E and Table 4), gemini-2.5-flash with more compute, on the four questions
of its table: Q1 0.4375 -> 0.625, Q2 0.0625 -> 0, Q3 and Q4 flat (0.1875 and 0); for Q1 and
Q3 "only 3 of 32 first-round drafts are correct". A mixed per-question result, not a uniform
gain. For the mean over all problems the paper gives no figure in papers/. Ours: not yet run.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("aime2024", "aime2025")  # the AIME year; none given: aime2024


def get_config(arg=None):
    return load_config(f"{os.path.join(HERE, 'api_rows.py')}:gemini25flash,table4,{arg or 'aime2024'}")
