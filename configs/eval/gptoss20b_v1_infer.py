"""V1-Infer (arXiv 2603.04304 §4) against a served GPT-OSS-20B: best-of-N with N = 16
candidates, selected by the pairwise Swiss tournament (`pairwise_v1`) at 1x, 2x and 3x N
judge calls, against the pointwise baseline (`self_pointwise`, each candidate rated 1-10).

The model runs behind an OpenAI-compatible server on 127.0.0.1:8000; every model call of the
operators is a token-id request to its /v1/completions (`backend.api = "completions"`), so
prompts are rendered locally with the model's own chat template and tokenizer, which must
therefore be the served model's: pass its HF directory (the one holding tokenizer.json and
the chat template) as `--config.backend.tokenizer`. Left empty, the run stops before any
request (no local tokenizer is named "gpt-oss-20b"), rather than sending another
tokenizer's ids. The server needs no key (`api_key_env = ""`). No reasoning level is
passed: the prompt carries whatever the model's chat template writes when given none
(the quick-start of V1's released code runs GPT-OSS-20B with the level "medium").

Benchmarks: the paper's (LiveCodeBench v5/v6, CodeContests, HMMT) are not yet tasks in
prd_jax (issue 33). The stand-ins are ours: arg "math" (default) runs AIME 2025 (V1's
abstract names AIME among its math benchmarks, and its code's data includes AIME 2025),
arg "code" runs HumanEval graded by its tests in the sandbox. Sampling as V1 §4 sets it:
math T = 1.0, code T = 0.6, top-p 0.95. Tournament d_min = 2, h = 8, tau = 0.1 (V1 Alg. 2-4,
the Judge defaults). Ours: per-candidate budgets (math 16k tokens, quoted at most 8k with a
2k head; code 8k, quoted 4k), judge reasoning budgets (math 4k, code 2k), k = 4 samples
per problem.

Open: GPT-OSS writes its reasoning in an analysis channel, not a `</think>` block, so a
judge or a quote sees the candidate's reasoning too (head + tail truncated, the final
answer at the tail) instead of its answer alone.

Command to run (start the server first, either one):
    vllm serve openai/gpt-oss-20b --max-logprobs 20
    python -m sglang.launch_server --model-path openai/gpt-oss-20b
then (vLLM serves on port 8000; SGLang's default port is 30000, so add
--config.backend.base_url=http://127.0.0.1:30000/v1):
    prd-jax eval --config configs/eval/gptoss20b_v1_infer.py:math --workdir runs/gptoss20b_v1_aime2025 \\
        --config.backend.tokenizer=/path/to/gpt-oss-20b_hf_dir
    prd-jax eval --config configs/eval/gptoss20b_v1_infer.py:code --workdir runs/gptoss20b_v1_humaneval \\
        --config.backend.tokenizer=/path/to/gpt-oss-20b_hf_dir
A forced rating (a judge that wrote no rating tag) reads the server's top 20 log-probabilities
of the next token: vLLM must allow 20 (`--max-logprobs 20`; `backend.rating_top_logprobs`).

Expected (paper, V1 abstract): "V1-Infer improves Pass@1 by up to 10% over pointwise
verification" (over its benchmarks and models). For GPT-OSS-20B on AIME 2025 or HumanEval,
and for how accuracy moves with the judge budget, the paper gives no figure we could verify;
ours: not yet run.
"""

import ml_collections

ARGS = ("math", "code")
SETTINGS = {  # per arg: data, sampling and budgets
    "math": dict(dataset="aime2025", temperature=1.0, max_problem_tokens=1024, num_problems=30,
                 gen=16384, cand=8192, think=4096, domain="math"),
    "code": dict(dataset="humaneval", temperature=0.6, max_problem_tokens=2048, num_problems=164,
                 gen=8192, cand=4096, think=2048, domain=None),  # None: the "code" set's judges
}


def get_config(arg=None):
    arg = "math" if arg is None else arg
    if arg not in ARGS:
        raise ValueError(f"configs/eval/gptoss20b_v1_infer.py: arg {arg!r} unknown; allowed: {ARGS} "
                         "(none given: math)")
    s = SETTINGS[arg]
    c = ml_collections.ConfigDict()
    if arg == "code":
        c.task = "humaneval"
        c.split = ""
        c.templates = "code"
    c.dataset = s["dataset"]
    # A label, not local weights: nothing is loaded with a remote backend. With
    # backend.tokenizer empty, the tokenizer is looked up by this name and none exists, so the
    # run refuses to start (token ids must be the served model's).
    c.model = "gpt-oss-20b"
    c.model_path = ""
    c.data_dir = ""
    c.num_problems = s["num_problems"]
    c.k_samples = 4
    c.batch_size = 10
    c.seed = 0
    c.temperature = s["temperature"]
    c.top_p = 0.95
    c.top_k = 0
    c.max_problem_tokens = s["max_problem_tokens"]
    c.backend = ml_collections.ConfigDict(dict(
        kind="openai", base_url="http://127.0.0.1:8000/v1", model="openai/gpt-oss-20b", api="completions",
        api_key_env="", tokenizer="", max_concurrency=64))  # a local server batches many requests
    common = dict(type="best_of_n", n=16, max_new_tokens=s["gen"], candidate_max_tokens=s["cand"],
                  truncation_head=s["cand"] // 4)
    judge = dict(max_new_tokens=s["think"], **({"domain": s["domain"]} if s["domain"] else {}))
    c.operators = [dict(common, selector="pairwise_v1", judge=dict(judge, budget_multiple=m)) for m in (1, 2, 3)]
    c.operators.append(dict(common, selector="self_pointwise", judge=judge))
    return c
