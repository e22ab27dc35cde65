"""HumanEval through the operators (V1 arXiv 2603.04304 §4 evaluates on code; PDR arXiv 2510.01123
names code as the next domain): Long-CoT, best-of-N with self_pointwise / pairwise_v1 /
majority selection, and PDR with the code refine prompt ("code" template set), graded by
running each final program against the problem's tests in the sandbox (`tasks.humaneval`,
`rewards.code.evaluate_many`). pass@1 is the table's mean@k, pass@k its pass@k; B_seq /
B_total, judge_unparsed as for math. `results.jsonl` rows carry task, passed, total, status.

CPU default (SmolLM2-135M-Instruct from the wheel, first `num_problems` problems, k = 1,
N = 2, 48-token budgets: checks the pipeline, the model is too small to pass tests):
    prd-jax eval --config configs/eval/humaneval_v1.py --config.num_problems=4 --workdir /tmp/he_v1
Expected (the paper gives no figure; ours, measured): runtime 19m26s on 2 busy, shared CPU
cores (2026-12-01; one compile per operator, most of it compiling), 20 rows, pass@1 0.000 for
every operator (SmolLM2-135M in 48 tokens passes some asserts, e.g. 3/7 on HumanEval/0, but no
problem fully); judge unparsed 8 per judged operator (its ratings are forced).

Paper scale (the arg is a model alias; the V1 paper's is Qwen3-4B-Instruct-2507): all 164
problems, k = 4 (pass@1 and pass@4), N = 16, pairwise budget m*N with m in {1, 2, 3},
code sampling T = 0.6, top-p 0.95 (V1 App. C.1); for accelerators:
    prd-jax eval --config configs/eval/humaneval_v1.py:qwen3-4b-instruct-2507 --workdir gs://.../he_v1 \
        --config.model_path=/ckpts/Qwen3-4B-Instruct-2507 --config.mesh=fsdp=2,tensor=4
"""

import ml_collections

from prd_jax.operators.specs import with_thinking
from prd_jax.sampling import Sampling

PAPER_MODELS = ("qwen3-4b-instruct-2507", "qwen3-4b", "qwen3-8b")


def get_config(arg=None):
    if arg not in PAPER_MODELS + (None,):
        raise ValueError(f"configs/eval/humaneval_v1.py: arg {arg!r} unknown; allowed: None (CPU) or {PAPER_MODELS}")
    cpu = arg is None
    c = ml_collections.ConfigDict()
    c.task = "humaneval"
    c.split = ""
    c.templates = "code"
    c.model = "smollm2-135m" if cpu else arg
    c.model_path = ""
    c.mesh = ""
    c.data_dir = ""
    if not cpu:
        c.dtype = "bfloat16"
    c.num_problems = 4 if cpu else 164
    c.k_samples = 1 if cpu else 4
    c.batch_size = 2 if cpu else 8
    c.seed = 0
    c.sampling = Sampling(temperature=0.6, top_p=0.95, top_k=0,  # V1 App. C.1: code at T = 0.6, top-p 0.95
                          max_rows=0 if cpu else 64).to_config()
    c.max_problem_tokens = 384 if cpu else 2048
    n = 2 if cpu else 16
    gen = 48 if cpu else 8192
    cand = 48 if cpu else 4096
    think = 8 if cpu else 2048
    common = dict(max_new_tokens=gen, candidate_max_tokens=cand, truncation_head=cand // 4)
    judge = dict(max_new_tokens=think)  # domain: the "code" set's
    ops = [dict(type="long_cot", max_new_tokens=gen),
           dict(type="best_of_n", n=n, selector="majority", **common),
           dict(type="best_of_n", n=n, selector="self_pointwise", judge=judge, **common)]
    for m in ((1,) if cpu else (1, 2, 3)):
        ops.append(dict(type="best_of_n", n=n, selector="pairwise_v1", judge=dict(judge, budget_multiple=m),
                        **common))
    ops.append(dict(type="pdr", schedule=(2, 1) if cpu else (8, 4, 1), distill="shared_topk", k=2 if cpu else 4,
                    selector="random", kappa=gen, **common))
    c.operators = ops
    if arg in ("qwen3-4b", "qwen3-8b"):  # thinking models: thinking + answer budgets per call role (ours)
        c.enable_thinking = True
        c.operators = with_thinking(ops, answer_tokens=2048, summary_answer_tokens=2048, judge_answer_tokens=256)
    elif arg is not None:  # Qwen3-4B-Instruct-2507 writes no thinking block: nothing to force
        c.enable_thinking = False
    return c
