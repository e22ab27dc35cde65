"""PDR paper Table 1 (arXiv 2510.01123 §4.1) with gemini-2.5-flash through Gemini's
OpenAI-compatible API: Sequential Refinement with and without error analysis on AIME 2024 or
AIME 2025.

Rows (`api_rows.table1`): SR with 2 refinement rounds of 8k tokens per call, without and
with error analysis (the refine prompt first asks what is wrong with the previous answer).
mean@16 over the year's 30 problems, T = 1.0, top-p 1.0 (paper); the rounds and the
per-call budget are ours.

Backend: Gemini's OpenAI-compatible endpoint
https://generativelanguage.googleapis.com/v1beta/openai/, model gemini-2.5-flash, chat API;
thinking_budget=-1 sends each call's own token budget as thinking_config.thinking_budget
(capped at 24k on this model, so no per-call budget here exceeds 24,576). Sampling
T = 1.0, top-p 1.0 is sent. The key is read from the environment variable GEMINI_API_KEY.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export GEMINI_API_KEY=...
    prd-jax eval --config configs/eval/gemini25flash_table1_sr.py:aime2024 \
        --workdir runs/gemini25flash_table1_sr_aime2024
    prd-jax eval --config configs/eval/gemini25flash_table1_sr.py:aime2025 \
        --workdir runs/gemini25flash_table1_sr_aime2025
A cheaper first pass: --config.k_samples=4. A rerun in the same workdir resumes, and retries
rows whose requests failed; summary.md also counts each operator's failed, empty and
length-capped requests.

Tokenizer: Gemini's tokenizer has no local copy, so backend.tokenizer defaults to "" and the
SmolLM2 tokenizer (shipped with the package) turns answer text into ids for quoting; any
local one can be passed instead:
    --config.backend.tokenizer=/path/to/a/tokenizer_dir
Budgets and B_seq / B_total come from the server's usage either way.

Expected: the paper gives no figure we could verify for SR with and without error
analysis; ours: not yet run.
"""

import importlib.util
import os

_SPEC = importlib.util.spec_from_file_location(
    "prd_eval_api_rows", os.path.join(os.path.dirname(os.path.abspath(__file__)), "api_rows.py"))
api_rows = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(api_rows)

ARGS = api_rows.YEARS  # the AIME year; none given: aime2024


def get_config(arg=None):
    return api_rows.config("gemini25flash", "table1", arg, __file__)
