"""PDR paper Table 4 / App. E (arXiv 2510.01123): 32 first-round drafts, 4 rounds against 5.

Qwen3-8B, AIME 2024, 8k tokens per call, shared top-2 ranked by `self_pointwise`, mean@16:
schedules (32, 8, 4, 1) (4 rounds) and (32, 16, 8, 4, 1) (5 rounds), with (8, 4, 1) as the
reference point. The intermediate round sizes are ours (the paper's table fixes M_1 = 32
and the round count).

Command to run:
    prd-jax compile --config configs/eval/pdr_rounds.py:v5p-128
    prd-jax eval --config configs/eval/pdr_rounds.py:v5p-128 --workdir gs://BUCKET/pdr_table4 \\
        --config.model_path=/ckpts/Qwen3-8B
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured): at most 5.6e8 generated
tokens; roofline 1.7 h on a v5p-128, 9.5 h on 8xH200 (a floor).
Expected (paper): the fifth round adds accuracy at a higher B_seq.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")
COMMON = dict(type="pdr", distill="shared_topk", k=2, selector="self_pointwise",
              judge=dict(domain="math", max_new_tokens=1024), max_new_tokens=8192, candidate_max_tokens=4096,
              truncation_head=1024)


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/eval/pdr_rounds.py: arg {arg!r} unknown; allowed: {ARGS}")
    c = load_config(f"{os.path.join(HERE, 'aime_pdr_sweep.py')}:{arg}")  # pod, data, sampling
    c.operators = [dict(COMMON, schedule=s) for s in ((8, 4, 1), (32, 8, 4, 1), (32, 16, 8, 4, 1))]
    return c
