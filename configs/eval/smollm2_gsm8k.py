"""Long-CoT vs SR vs PDR with SmolLM2-135M-Instruct on a slice of GSM8K test (CPU, minutes).

Command to run:
    prd-jax eval --config configs/eval/smollm2_gsm8k.py --workdir /tmp/eval_gsm8k \
        --config.num_problems=8

Expected: ~4-8 minutes on 2 CPU cores for 8 problems, k=1. SmolLM2-135M is weak on
GSM8K (single-digit to low-teens % accuracy); the point is the budget accounting and the
B_seq/B_total trade-off, not the accuracy.
"""

import ml_collections


def get_config(arg=None):
    c = ml_collections.ConfigDict()
    c.model = "smollm2-135m"
    c.model_path = ""
    c.dataset = "gsm8k_test"
    c.data_dir = ""  # default: $PRD_DATA_DIR, else ../shared/data
    c.num_problems = 8
    c.k_samples = 1
    c.batch_size = 4
    c.seed = 0
    c.temperature = 1.0
    c.top_p = 1.0
    c.top_k = 0
    c.max_problem_tokens = 192
    budget = 128
    c.operators = [
        dict(type="long_cot", max_new_tokens=2 * budget),
        dict(type="sr", rounds=1, max_new_tokens=budget, candidate_max_tokens=budget, truncation_head=32),
        dict(type="pdr", schedule=(4, 1), distill="shared_topk", k=2, selector="random",
             max_new_tokens=budget, candidate_max_tokens=budget, truncation_head=32, kappa=64),
    ]
    return c
