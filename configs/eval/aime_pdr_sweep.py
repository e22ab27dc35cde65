"""The PDR paper's AIME grid (arXiv 2510.01123 §4, Fig. 3-4): Long-CoT vs SR vs PDR.

Schedules (8,4,1) and (16,8,4,1); distill = global summary, shared top-k, per-sample
top-k, random-k with k=2; per-call budgets 8k/16k/24k; mean@16 on AIME 2024 (switch with
--config.task=aime2025). For accelerators (e.g. Qwen3-8B on 8xH200 or a v5p pod).
Top-k is ranked by the model itself (`self_pointwise`, up to 1024 tokens of judge
reasoning per candidate; ours: the paper names a model-based ranker, not its budget);
random-k draws at random and pays for no ranking.

Context: Qwen3-8B has 40,960 positions. The (16, 8, 4, 1) global summary quotes 16
candidates in one call, so candidates there are capped at 2048 tokens (head 512): 16 x 2048
+ problem (1024) + template + kappa (2048) stays under the context; every other operator
quotes at most 2 candidates of 4096. `prd-jax compile` and every model call refuse a prompt
plus budget past the context (naming the call).

The arg names the pod (mesh and `prd-jax compile` target): v5p-128 ("data=1,fsdp=16,tensor=4",
16 problems per batch, one per batch shard) or 8xh200 ("fsdp=2,tensor=4", 8 problems).

Command to run:
    prd-jax compile --config configs/eval/aime_pdr_sweep.py:v5p-128     # will it fit? (CPU host, libtpu)
    prd-jax eval --config configs/eval/aime_pdr_sweep.py:v5p-128 --workdir gs://.../aime_sweep \
        --config.model_path=/ckpts/Qwen3-8B

Fig. 3's point, B_seq 49k (o3-mini's, the paper's only Fig. 3 values), lives in this grid's
16k-per-call rows: SR (2 refinements, 3 calls) and every PDR (8, 4, 1) row at 16,384 per call
generate at most 49,152 tokens on the accepted path (plus, for a model-ranked top-k, the
accepted candidates' rating calls, which `b_seq_no_judge` leaves out). Long-CoT cannot join it
in-graph: one 49k-token call does not fit Qwen3-8B's 40,960 positions, so Long-CoT stops at 24k
here (32k in configs/eval/pdr_matched_bseq.py); the Long-CoT side of that point is
configs/eval/o3mini_fig3_matched_bseq.py (Long-CoT at 49,152, within o3-mini's 100,000 output
tokens).

Expected (paper, abstract): "iterative pipelines surpass single-pass baselines at matched
sequential budgets, with PDR delivering the largest gains (e.g., +11% on AIME 2024 and +9%
on AIME 2025)" (that sentence names no model); for Qwen3-8B's grid the paper gives no figure
we could verify; ours: not yet run. Runtime ESTIMATE (`prd-jax compile --estimate`, not
measured): at most 4.5e9 generated tokens; roofline 25 h on a v5p-128, 129 h on 8xH200 (a
floor).
"""

import ml_collections

from prd_jax.operators.specs import with_thinking
from prd_jax.sampling import Sampling


ARGS = ("v5p-128", "8xh200")
MESHES = {"v5p-128": "data=1,fsdp=16,tensor=4", "8xh200": "fsdp=2,tensor=4"}
TARGETS = {"v5p-128": "v5p:4x4x4", "8xh200": "h200:8"}
BATCH = {"v5p-128": 16, "8xh200": 8}
JUDGE = dict(domain="math", max_new_tokens=1024)  # the self_pointwise ranker's reasoning budget


def get_config(arg=None):
    if arg not in ARGS:
        raise ValueError(f"configs/eval/aime_pdr_sweep.py: arg {arg!r} unknown; allowed: {ARGS}")
    c = ml_collections.ConfigDict()
    c.model = "qwen3-8b"
    c.model_path = ""
    c.dtype = "bfloat16"
    c.mesh = MESHES[arg]
    c.target = TARGETS[arg]
    c.task = "aime2024"  # the problems and their grading (prd_jax.tasks)
    c.data_dir = ""
    c.num_problems = 30
    c.k_samples = 16
    c.batch_size = BATCH[arg]
    c.seed = 0
    c.sampling = Sampling(temperature=1.0, top_p=1.0, top_k=0,
                          max_rows=256 if arg == "v5p-128" else 32).to_config()  # decode rows in flight per call
    c.max_problem_tokens = 1024
    ops = []
    for budget in (8192, 16384, 24576):
        ops.append(dict(type="long_cot", max_new_tokens=budget))
        ops.append(dict(type="sr", rounds=2, max_new_tokens=budget, candidate_max_tokens=4096,
                        truncation_head=1024))
        for schedule in ((8, 4, 1), (16, 8, 4, 1)):
            for distill in ("global_summary", "shared_topk", "per_sample_topk", "random_k"):
                cap = 2048 if (distill == "global_summary" and schedule[0] == 16) else 4096
                ranked = distill in ("shared_topk", "per_sample_topk")
                ranker = dict(selector="self_pointwise", judge=JUDGE) if ranked else dict(selector="random")
                ops.append(dict(type="pdr", schedule=schedule, distill=distill, k=2, kappa=2048,
                                max_new_tokens=budget, candidate_max_tokens=cap, truncation_head=cap // 4,
                                **ranker))
    c.operators = ops
    # Qwen3-8B thinks in every call: each call role's budget is split into a thinking budget
    # and an answer budget (ours, the paper gives no split: 2048 answer tokens per call, 1024
    # of the summary's kappa, 256 of a judge's budget), the block force-closed at its budget.
    c.enable_thinking = True
    c.operators = with_thinking(c.operators, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
