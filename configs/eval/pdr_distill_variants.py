"""PDR paper Table 2 (arXiv 2510.01123 §4.1): the four distill variants, extractive ones ranked
by the model itself.

Qwen3-8B, AIME 2024, PDR (8, 4, 1), 16k tokens per call, mean@16:
- global summary (kappa = 2048 summary tokens);
- shared top-2 and per-sample top-2, ranked with `self_pointwise` (the model rates each
  draft 1-10 after up to 1k tokens of reasoning), plus the same two ranked by our V1
  extension `pairwise_v1` (Swiss tournament, m = 1);
- random-k (k = 2, no ranking: each refine call draws its own two drafts).
Candidates are quoted at most 4096 tokens (head 1024 + tail), after their thinking block.

Command to run:
    prd-jax compile --config configs/eval/pdr_distill_variants.py:v5p-128
    prd-jax eval --config configs/eval/pdr_distill_variants.py:v5p-128 --workdir gs://BUCKET/pdr_table2 \\
        --config.model_path=/ckpts/Qwen3-8B
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured): at most 6.8e8 generated
tokens; roofline 3.4 h on a v5p-128, 17.7 h on 8xH200 (a floor).
Expected (paper): global summary and per-sample top-k ahead of random-k.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("v5p-128", "8xh200")
COMMON = dict(type="pdr", schedule=(8, 4, 1), k=2, max_new_tokens=16384, candidate_max_tokens=4096,
              truncation_head=1024)
JUDGE = dict(domain="math", max_new_tokens=1024)


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/eval/pdr_distill_variants.py: arg {arg!r} unknown; allowed: {ARGS}")
    c = load_config(f"{os.path.join(HERE, 'aime_pdr_sweep.py')}:{arg}")  # pod, data, sampling
    ops = [dict(COMMON, distill="global_summary", kappa=2048)]
    for distill in ("shared_topk", "per_sample_topk"):
        ops += [dict(COMMON, distill=distill, selector=s, judge=JUDGE) for s in ("self_pointwise", "pairwise_v1")]
    ops.append(dict(COMMON, distill="random_k", selector="random"))
    c.operators = ops
    return c
