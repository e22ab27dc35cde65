"""Shared builder of the V1 paper's eval configs (arXiv 2603.04304 §3-5) on its models and
benchmarks. Not a config of its own: `configs/eval/gptoss20b_v1_infer.py`,
`gptoss20b_v1_vs_rsa.py`, `gptoss20b_v1_claims.py`, `qwen3_4b_v1_matched_calls.py` and
`qwen3_4b_v1_after_rl.py` are a few lines each around `config(model, rows, bench, backend,
path)`. `ARGS = ()`: the config tests find no case to load here.

Command to run: one of the configs above, e.g.
    prd-jax eval --config configs/eval/gptoss20b_v1_infer.py:codecontests --workdir runs/gptoss20b_v1_cc

What the paper sets and every config here keeps (V1 §4, quoted from
../shared/papers/v1-pairwise-self-verification-arxiv-2603.04304.txt: "Most experiments generate
N ∈ {8, 16} candidate solutions", "verification budgets of 1x, 2x, and 3x the number of base
solutions", "Swiss refinement uses dmin = 2, window size h = 8, confidence floor τ = 0.1",
"Sampling uses temperature 0.6 for code, 1.0 for math, and top-p 0.95 throughout"):
N = 16 candidates; pairwise verification budgets of 1x, 2x, 3x N judge calls; Swiss
tournament d_min = 2, window h = 8, tau = 0.1 (the `Judge` defaults, written out here so the
config carries them); sampling top-p 0.95 with T = 0.6 on code and T = 1.0 on math.

Benchmarks (`BENCHMARKS`, the tasks of `prd_jax/tasks/`): `codecontests` (its test split, 165
problems), `livecodebench_v5` / `livecodebench_v6` (contest dates 2024-08-01..2025-02-01 of
release_v5 and 2025-02-01..2025-05-01 of release_v6: our reading, the paper gives no dates; the
sources are in `tasks/livecodebench.py` and docs/data.md), `hmmt_feb2025`
(30 problems). The data are the published files under the data dir (`--config.data_dir`,
default $PRD_DATA_DIR); `prd-jax data get codecontests livecodebench hmmt_feb2025` fetches them.

Backends (the last part of each arg): `remote` (default) sends every model call as token ids
to an OpenAI-compatible /v1/completions server (vLLM or SGLang serving the model); prompts are
rendered here with the served model's tokenizer and chat template, read from the checkpoint
directory named by the model's environment variable (`MODELS[...]["env"]`: GPT_OSS_20B_DIR,
QWEN3_4B_DIR) or `--config.backend.tokenizer=...`; with neither the run stops before any
request. `8xh200` / `v5p-128` run the operators in-graph on the named model, weights from the
same variable or `--config.model_path=...`; each declares `target` for `prd-jax compile`. Fits
(docs/results/2026-12-04-aot-fit-4.md): every config built on this one fits 8xh200; on v5p-128
qwen3_4b_v1_after_rl and qwen3_4b_v1_matched_calls fit, the GPT-OSS configs' v5p-128 args are
not compiled (gptoss20b_v1_infer fits v5p-64).

Ours, not the paper's (the paper gives none of these in the text available to us): the
per-candidate budgets (16k generated tokens; a judge quotes at most 4k of a code candidate,
8k of a math one, head 1/4 + tail), the judges' 4k reasoning budget, k = 4 samples per
problem, problem prompts of at most 4k tokens on code (1k on math; longer ones are skipped
and counted in the summary).

Each config's paper number, what the paper leaves open, and the request estimates:
docs/results/2026-12-03-v1-paper-configs.md.
"""

import os

import ml_collections

from prd_jax.sampling import Sampling

ARGS = ()  # a helper documents no arg
N = 16  # V1 App. C.1: candidates per problem (N in {8, 16})
BUDGETS = (1, 2, 3)  # V1 App. C.1: pairwise judge calls per candidate (B = m N)
TOURNAMENT = dict(d_min=2, window=8, tau=0.1)  # V1 App. C.1: "dmin = 2, window size h = 8, confidence floor τ = 0.1"
TOP_P = 0.95  # V1 App. C.1
BENCHMARKS = {  # task, split, sampling temperature (V1 App. C.1), problems, domain-specific budgets (ours)
    "codecontests": dict(task="codecontests", split="test", temperature=0.6, num_problems=165, domain="code"),
    # num_problems: a cap at the release's size, so the whole date window runs (eval prints its count;
    # 279 and 175 are reported elsewhere, docs/data.md, not checked against the files here)
    "livecodebench_v5": dict(task="livecodebench_v5", split="", temperature=0.6, num_problems=880, domain="code"),
    "livecodebench_v6": dict(task="livecodebench_v6", split="", temperature=0.6, num_problems=1055, domain="code"),
    "hmmt_feb2025": dict(task="hmmt_feb2025", split="", temperature=1.0, num_problems=30, domain="math"),
}
DOMAIN = {  # ours (see the docstring)
    "code": dict(templates="code", max_problem_tokens=4096, gen=16384, cand=4096, think=4096),
    "math": dict(templates="", max_problem_tokens=1024, gen=16384, cand=8192, think=4096),
}
MODELS = {  # named config, served name, env variable naming the HF checkpoint dir
    "gpt-oss-20b": dict(served="openai/gpt-oss-20b", env="GPT_OSS_20B_DIR"),
    "qwen3-4b-instruct-2507": dict(served="Qwen/Qwen3-4B-Instruct-2507", env="QWEN3_4B_DIR"),
}
PODS = {  # in-graph backends: mesh, compile target, problems per batch, rows per model call
    "v5p-128": dict(mesh="data=1,fsdp=16,tensor=4", target="v5p:4x4x4", batch_size=16, max_rows=256),
    "8xh200": dict(mesh="fsdp=2,tensor=4", target="h200:8", batch_size=8, max_rows=32),
}
BACKENDS = ("remote",) + tuple(PODS)


def judge(bench: str, m: int = 1) -> dict:
    """A judge entry: the benchmark's reasoning budget, budget multiple m, the tournament settings."""
    d = BENCHMARKS[bench]["domain"]
    return dict(domain=d, max_new_tokens=DOMAIN[d]["think"], budget_multiple=m, **TOURNAMENT)


def best_of_n(bench: str, selector: str, n: int = N, m: int = 1) -> dict:
    d = DOMAIN[BENCHMARKS[bench]["domain"]]
    entry = dict(type="best_of_n", n=n, selector=selector, max_new_tokens=d["gen"], candidate_max_tokens=d["cand"],
                 truncation_head=d["cand"] // 4)
    if selector not in ("random", "majority"):
        entry["judge"] = judge(bench, m)
    return entry


def long_cot(bench: str) -> dict:
    return dict(type="long_cot", max_new_tokens=DOMAIN[BENCHMARKS[bench]["domain"]]["gen"])


def rsa(bench: str, loops: int) -> dict:
    """RSA (V1 §4's baseline): a population of N, aggregating subsets of 4 (ours), `loops` loops."""
    d = DOMAIN[BENCHMARKS[bench]["domain"]]
    return dict(type="rsa", population=N, subset=4, loops=loops, max_new_tokens=d["gen"],
                candidate_max_tokens=d["cand"], truncation_head=d["cand"] // 4)


def parse_arg(arg, path: str, benches=tuple(BENCHMARKS), default: str = "codecontests"):
    """`BENCH[,BACKEND]` -> (bench, backend); None: (`default`, "remote"). Errors name the file."""
    parts = (arg or default).split(",")
    allowed = [f"{b}[,{'|'.join(BACKENDS)}]" for b in benches]
    if len(parts) not in (1, 2) or parts[0] not in benches or (len(parts) == 2 and parts[1] not in BACKENDS):
        raise ValueError(f"configs/eval/{os.path.basename(path)}: arg {arg!r} unknown; allowed: {allowed} "
                         f"(none given: {default}; backend default: remote)")
    return parts[0], (parts[1] if len(parts) == 2 else "remote")


def config(model: str, operators: list, bench: str, backend: str, k_samples: int = 4) -> ml_collections.ConfigDict:
    """The eval config of `operators` for `model` on `bench` through `backend`."""
    b, m = BENCHMARKS[bench], MODELS[model]
    d = DOMAIN[b["domain"]]
    checkpoint = os.environ.get(m["env"], "")
    c = ml_collections.ConfigDict()
    c.task = b["task"]
    c.split = b["split"]
    c.templates = d["templates"]  # "": the task's own set
    c.data_dir = ""  # default: $PRD_DATA_DIR, else the user data dir (`prd-jax data get`; docs/data.md)
    c.model = model
    c.model_path = "" if backend == "remote" else checkpoint
    c.num_problems = b["num_problems"]
    c.k_samples = k_samples
    c.seed = 0
    c.sampling = Sampling(temperature=b["temperature"], top_p=TOP_P, top_k=0).to_config()
    c.max_problem_tokens = d["max_problem_tokens"]
    if backend == "remote":
        c.batch_size = 10
        c.backend = ml_collections.ConfigDict(dict(
            kind="openai", base_url="http://127.0.0.1:8000/v1", model=m["served"], api="completions",
            endpoint="vllm", api_key_env="", tokenizer=checkpoint, max_concurrency=64))  # a local server batches many requests
    else:
        pod = PODS[backend]
        c.mesh, c.target = pod["mesh"], pod["target"]
        c.dtype = "bfloat16"
        c.batch_size, c.sampling.max_rows = pod["batch_size"], pod["max_rows"]
    c.operators = operators
    return c


def get_config(arg=None):
    raise ValueError("configs/eval/v1_paper.py is a helper: run configs/eval/gptoss20b_v1_infer.py, "
                     "gptoss20b_v1_vs_rsa.py, gptoss20b_v1_claims.py, qwen3_4b_v1_matched_calls.py or "
                     "qwen3_4b_v1_after_rl.py")
