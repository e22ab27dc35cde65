"""V1-Infer (arXiv 2603.04304 §4) on a LiveCodeBench-format fixture with SmolLM2-135M-Instruct on
CPU: the pipeline and the sandbox statuses, not accuracy (issue 33).

The fixture (`configs/eval/fixtures/code/livecodebench/tiny.jsonl`, two problems of ours in the
published `code_generation_lite` format: a stdin problem and a LeetCode `class Solution`
problem, each with base64(zlib(pickle(JSON))) private tests) is read by the `livecodebench`
task; each final program runs on the problem's public and private tests in the sandbox
(`tasks.contest`), and `results.jsonl` rows carry passed, total and status (ok, wrong_answer,
timeout, runtime_error, compile_error; "error" when no program was written). Operators:
best-of-N with N = 2 selected by the pairwise Swiss tournament (`pairwise_v1`, 1x N judge
calls) and by pointwise self-verification (`self_pointwise`); code sampling T = 0.6,
top-p 0.95 (V1 App. C.1). Budgets are tiny (ours): 160 tokens per candidate, 16 per judge.

Command to run:
    prd-jax eval --config configs/eval/tiny_code_v1.py --workdir /tmp/tiny_code_v1
Expected (the paper gives no figure; ours): about 7-8 minutes on 2 shared CPU cores, most of it
compiling; pass@1 0.000 for both operators (a 135M model), with statuses such as compile_error,
runtime_error and wrong_answer showing which stage each program reached. Record:
docs/results/2026-12-03-contest-tasks.md.
"""

import os

import ml_collections

from prd_jax.sampling import Sampling

HERE = os.path.dirname(os.path.abspath(__file__))


def get_config(arg=None):
    if arg is not None:
        raise ValueError(f"configs/eval/tiny_code_v1.py: arg {arg!r} unknown; allowed: None (CPU)")
    c = ml_collections.ConfigDict()
    c.task = "livecodebench"
    c.split = ""
    c.templates = "code"
    c.data_dir = os.path.join(HERE, "fixtures")  # the fixture, not the published files
    c.model = "smollm2-135m"
    c.model_path = ""
    c.num_problems = 2
    c.k_samples = 1
    c.batch_size = 2
    c.seed = 0
    c.sampling = Sampling(temperature=0.6, top_p=0.95, top_k=0).to_config()  # V1 App. C.1: code at T = 0.6, top-p 0.95
    c.max_problem_tokens = 256
    gen = 160
    common = dict(type="best_of_n", n=2, max_new_tokens=gen, candidate_max_tokens=gen, truncation_head=gen // 4)
    judge = dict(max_new_tokens=16)
    c.operators = [dict(common, selector="pairwise_v1", judge=dict(judge, budget_multiple=1)),
                   dict(common, selector="self_pointwise", judge=judge)]
    return c
