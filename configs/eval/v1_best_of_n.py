"""V1 selection at matched generation: best-of-N with pointwise / pairwise_v1 / random pairing /
round-robin / majority, and RSA with and without verify-and-prune (arXiv 2603.04304 §4, V1-Infer).

Paper setting (default; V1 App. C.1): N = 16 candidates, pairwise budget m*N with m in {1, 2, 3},
Swiss d_min = 2, h = 8, tau = 0.1; math sampling T = 1.0, top-p 0.95. For accelerators.

Command to run (paper scale; the arg names the pod: mesh, batch and `prd-jax compile` target):
    prd-jax compile --config configs/eval/v1_best_of_n.py:v5p-128
    prd-jax eval --config configs/eval/v1_best_of_n.py:v5p-128 --workdir gs://.../v1_aime \
        --config.model_path=/ckpts/Qwen3-8B

CPU smoke run (SmolLM2-135M, 2 GSM8K problems, N=4, tiny budgets):
    prd-jax eval --config configs/eval/v1_best_of_n.py:smoke --workdir /tmp/v1_smoke

Runtime ESTIMATE at pod scale (`prd-jax compile --estimate`, not measured): at most 7.7e8
generated tokens; roofline 4.3 h on a v5p-128, 22 h on 8xH200 (a floor).

Expected (paper, V1 summary): "V1-Infer improves Pass@1 by up to 10% over pointwise
verification"; against majority voting, per m, and for Qwen3-8B the paper gives no figure; ours: not yet run at pod scale. Qwen3-8B on AIME 2024 is our setting, not the
paper's (GPT-OSS-20B and Qwen3-4B-Instruct-2507 on code and HMMT:
configs/eval/gptoss20b_v1_infer.py, gptoss20b_v1_vs_rsa.py, qwen3_4b_v1_matched_calls.py).
The smoke run took 12m57s on 2 busy CPU cores (2026-11-30; one compile per operator) and
only checks the pipeline: SmolLM2-135M does not write rating tags within 16 judge tokens, so all its ratings are forced (8 "judge
unparsed" per judged operator: 4 pairwise calls x 2 problems), and it scores 0/2 except
RSA+prune at 1/2.
"""

import ml_collections

from prd_jax.operators.specs import with_thinking
from prd_jax.sampling import Sampling


ARGS = ("smoke", "v5p-128", "8xh200")
MESHES = {"v5p-128": "data=1,fsdp=16,tensor=4", "8xh200": "fsdp=2,tensor=4"}
TARGETS = {"v5p-128": "v5p:4x4x4", "8xh200": "h200:8"}


def get_config(arg=None):
    if arg not in ARGS + (None,):
        raise ValueError(f"configs/eval/v1_best_of_n.py: arg {arg!r} unknown; allowed: {ARGS}")
    smoke = arg == "smoke"
    c = ml_collections.ConfigDict()
    c.model = "smollm2-135m" if smoke else "qwen3-8b"
    c.model_path = ""
    c.mesh = MESHES.get(arg, "")
    if arg in TARGETS:
        c.target = TARGETS[arg]
        c.dtype = "bfloat16"
    c.task = "gsm8k" if smoke else "aime2024"
    c.data_dir = ""
    c.num_problems = 2 if smoke else 30
    c.k_samples = 1 if smoke else 4
    c.batch_size = 2 if smoke else (16 if arg == "v5p-128" else 8)
    c.seed = 0
    c.sampling = Sampling(temperature=1.0, top_p=0.95, top_k=0,
                          max_rows=(256 if arg == "v5p-128" else 32) if arg in TARGETS else 0).to_config()
    c.max_problem_tokens = 192 if smoke else 1024
    n = 4 if smoke else 16
    gen = 48 if smoke else 16384
    cand = 48 if smoke else 8192
    think = 16 if smoke else 4096
    common = dict(max_new_tokens=gen, candidate_max_tokens=cand, truncation_head=cand // 4)
    judge = dict(domain="math", max_new_tokens=think)
    ops = [dict(type="long_cot", max_new_tokens=gen),
           dict(type="best_of_n", n=n, selector="majority", **common),
           dict(type="best_of_n", n=n, selector="self_pointwise", judge=judge, **common)]
    for m in ((1,) if smoke else (1, 2, 3)):
        for selector in ("pairwise_v1", "pairwise_random"):
            ops.append(dict(type="best_of_n", n=n, selector=selector, judge=dict(judge, budget_multiple=m),
                            **common))
    if not smoke:
        ops.append(dict(type="best_of_n", n=n, selector="round_robin", judge=judge, **common))
        # RSA quotes 4 candidates per aggregation call: 4 x 4096 + problem + 16384 generated stays
        # under Qwen3-8B's 40,960 positions (4 x 8192 would need 50,313: refused by the context check)
        rsa = dict(common, candidate_max_tokens=4096, truncation_head=1024)
        ops.append(dict(type="rsa", population=n, subset=4, loops=3, **rsa))
        ops.append(dict(type="rsa", population=n, subset=4, loops=3, prune_every=1, keep=n // 2,
                        judge=dict(judge, budget_multiple=1), **rsa))
    else:
        ops.append(dict(type="rsa", population=n, subset=2, loops=1, prune_every=1, keep=2,
                        judge=judge, **common))
    c.operators = ops
    # Qwen3-8B thinks in every call: each call role's budget is split into a thinking budget
    # and an answer budget (ours, the paper gives no split: 2048 answer tokens per call, 1024
    # of the summary's kappa, 256 of a judge's budget), the block force-closed at its budget.
    c.enable_thinking = True
    c.operators = with_thinking(c.operators, answer_tokens=2048, summary_answer_tokens=1024, judge_answer_tokens=256)
    return c
