"""PDR paper Table 1 (arXiv 2510.01123 §4.1) with o3-mini through the OpenAI API: Sequential
Refinement with and without error analysis on AIME 2024 or AIME 2025.

Rows (`api_rows.table1`): SR with 2 refinement rounds of 8k tokens per call, without and
with error analysis (the refine prompt first asks what is wrong with the previous answer).
mean@16 over the year's 30 problems, T = 1.0, top-p 1.0 (paper); the rounds and the
per-call budget are ours.

Backend: https://api.openai.com/v1, model o3-mini, chat API; a call's budget is sent as
max_completion_tokens (it covers hidden reasoning), and no temperature / top-p is sent (the
o-series refuse them). reasoning_effort is left unset, so the API's own default applies: we
could not find the effort the paper ran o3-mini at; pin one with
--config.backend.reasoning_effort=low|medium|high. The key is read from the environment
variable OPENAI_API_KEY.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export OPENAI_API_KEY=...
    prd-jax eval --config configs/eval/o3mini_table1_sr.py:aime2024 \
        --workdir runs/o3mini_table1_sr_aime2024
    prd-jax eval --config configs/eval/o3mini_table1_sr.py:aime2025 \
        --workdir runs/o3mini_table1_sr_aime2025
A cheaper first pass: --config.k_samples=4. A rerun in the same workdir resumes, and retries
rows whose requests failed; summary.md also counts each operator's failed, empty and
length-capped requests.

Tokenizer: no local copy of o3-mini's exists, so backend.tokenizer defaults to "" and the
SmolLM2 tokenizer (shipped with the package) turns answer text into ids for quoting. For
counts closer to o3-mini's pass an o200k-based one, e.g. GPT-OSS's HF dir (its o200k-harmony
tokenizer is o200k-based like o3-mini's):
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
    return api_rows.config("o3mini", "table1", arg, __file__)
