"""The PDR paper's AIME grid (arXiv 2510.01123 §4, Fig. 3-4): Long-CoT vs SR vs PDR.

Schedules (8,4,1) and (16,8,4,1); distill = global summary, shared top-k, per-sample
top-k, random-k with k=2; per-call budgets 8k/16k/24k; mean@16 on AIME 2024 (switch with
--config.dataset=aime2025). For accelerators (e.g. Qwen3-8B on 8xH200 or a v5p pod).

Command to run:
    prd-jax eval --config configs/eval/aime_pdr_sweep.py --workdir gs://.../aime_sweep \
        --config.model=qwen3-8b --config.model_path=/ckpts/Qwen3-8B --config.mesh=fsdp=-1

Expected: the paper reports PDR above Long-CoT at matched B_seq on AIME 2024/2025 with
8B-scale models; the run is ~O(10^9) generated tokens (hours on a pod; not for CPU).
"""

import ml_collections


def get_config(arg=None):
    c = ml_collections.ConfigDict()
    c.model = "qwen3-8b"
    c.model_path = ""
    c.mesh = ""
    c.dataset = "aime2024"
    c.data_dir = ""
    c.num_problems = 30
    c.k_samples = 16
    c.batch_size = 8
    c.seed = 0
    c.temperature = 1.0
    c.top_p = 1.0
    c.top_k = 0
    c.max_problem_tokens = 1024
    ops = []
    for budget in (8192, 16384, 24576):
        ops.append(dict(type="long_cot", max_new_tokens=budget))
        ops.append(dict(type="sr", rounds=2, max_new_tokens=budget, candidate_max_tokens=4096,
                        truncation_head=1024))
        for schedule in ((8, 4, 1), (16, 8, 4, 1)):
            for distill in ("global_summary", "shared_topk", "per_sample_topk", "random_k"):
                ops.append(dict(type="pdr", schedule=schedule, distill=distill, k=2, selector="random",
                                kappa=2048, max_new_tokens=budget, candidate_max_tokens=4096,
                                truncation_head=1024))
    c.operators = ops
    return c
