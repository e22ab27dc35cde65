"""PDR paper Fig. 3 (arXiv 2510.01123 §4.1) with o3-mini through the OpenAI API: Long-CoT, SR
and PDR at matched sequential budget B_seq on AIME 2024 or AIME 2025.

Rows (`api_rows.fig3`): Long-CoT at 8k / 16k / 24k / 32k / 48k (49,152) / 64k completion
tokens (o3-mini takes up to 100,000 output tokens, hidden reasoning included: api_rows.py);
SR with 2 refinement rounds and PDR (8, 4, 1) at 8k and 16k per call; PDR (16, 8, 4, 1) at 8k
and 12k per call, all with a shared top-2 ranked by the model itself (`self_pointwise`, up to
4k tokens per rating call); PDR (8, 4, 1) with a global summary (kappa 2048) at 8k and 16k.
The paper's point, B_seq 49k, is the 16k-per-call rows (3 calls: at most 49,152 tokens on the
path, plus the rating calls for top-k), PDR (16, 8, 4, 1) at 12k (4 calls) and Long-CoT at
49,152. B_seq counts the tokens billed on the accepted path (§3.1), so accuracy is read off
each row's measured B_seq, with Long-CoT bracketing it. mean@16 over the year's 30 problems,
T = 1.0, top-p 1.0 (paper). The budget grid, the ranker's budget and kappa are ours.

Backend: o3-mini (OpenAI API, chat, max_completion_tokens, no temperature / top-p); the key is read from OPENAI_API_KEY. Endpoint, token knobs,
tokenizer, resume and cost notes: configs/eval/api_rows.py.

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export OPENAI_API_KEY=...
    prd-jax eval --config configs/eval/o3mini_fig3_matched_bseq.py:aime2024 \
        --workdir runs/o3mini_fig3_matched_bseq_aime2024
    prd-jax eval --config configs/eval/o3mini_fig3_matched_bseq.py:aime2025 \
        --workdir runs/o3mini_fig3_matched_bseq_aime2025

Expected (paper, Fig. 3 and App. D.2), o3-mini at B_seq 49k: AIME 2024 76.9 (Long CoT), 81.5
(SR), 86.7 (PDR); AIME 2025 73.5 (Long CoT), 77.1 (SR), 82.9 (PDR). The abstract: SR "provides
performance superior to long CoT", and PDR delivers "the largest gains (e.g., +11% on AIME
2024 and +9% on AIME 2025)". Ours: not yet run.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("aime2024", "aime2025")  # the AIME year; none given: aime2024


def get_config(arg=None):
    return load_config(f"{os.path.join(HERE, 'api_rows.py')}:o3mini,fig3,{arg or 'aime2024'}")
