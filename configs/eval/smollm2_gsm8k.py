"""Long-CoT vs SR vs PDR with SmolLM2-135M-Instruct on a slice of GSM8K test (CPU, minutes).

Command to run:
    prd-jax eval --config configs/eval/smollm2_gsm8k.py --workdir /tmp/eval_gsm8k \
        --config.num_problems=4

Expected (the paper gives no figure; ours): about 4.5 minutes on 2 CPU cores for the default 4
problems, k=1 (measured 2026-11-29: 4m27s wall, compile included). SmolLM2-135M scores 0/4 on
this slice at these budgets for all three operators (mean B_seq / B_total: long_cot 292/292, sr
524/524, pdr 636/1216); the point here is the pipeline and the budget accounting, not accuracy.
"""

import ml_collections

from prd_jax.sampling import Sampling


def get_config(arg=None):
    c = ml_collections.ConfigDict()
    c.model = "smollm2-135m"
    c.model_path = ""
    c.task = "gsm8k"  # the problems (split "test") and their grading (prd_jax.tasks)
    c.data_dir = ""  # default: $PRD_DATA_DIR, else the user data dir (`prd-jax data get`; docs/data.md)
    c.num_problems = 4
    c.k_samples = 1
    c.batch_size = 4
    c.seed = 0
    c.sampling = Sampling(temperature=1.0, top_p=1.0, top_k=0).to_config()
    c.max_problem_tokens = 192
    budget = 96
    c.operators = [
        dict(type="long_cot", max_new_tokens=2 * budget),
        dict(type="sr", rounds=1, max_new_tokens=budget, candidate_max_tokens=budget, truncation_head=32),
        dict(type="pdr", schedule=(4, 1), distill="shared_topk", k=2, selector="random",
             max_new_tokens=budget, candidate_max_tokens=budget, truncation_head=32, kappa=64),
    ]
    return c
