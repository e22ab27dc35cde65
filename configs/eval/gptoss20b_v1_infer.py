"""V1-Infer against pointwise self-verification (arXiv 2603.04304 §4) with GPT-OSS-20B on the
paper's benchmarks: best-of-N with N = 16 candidates selected by the pairwise Swiss tournament
(`pairwise_v1`) at 1x, 2x and 3x N judge calls, against pointwise verification
(`self_pointwise`, each candidate rated 1-10, N calls) and a single sample (`long_cot`, Pass@1
without selection).

Arg `BENCH[,BACKEND]`: BENCH is codecontests (default), livecodebench_v5, livecodebench_v6 or
hmmt_feb2025; BACKEND is remote (default: a served model), 8xh200, v5p-128 or v5p-64 (in-graph,
model `gpt-oss-20b`). Settings shared with the other V1 configs, what is ours and how the tokenizer /
weights are found (GPT_OSS_20B_DIR): configs/eval/v1_paper.py. Paper's: N = 16, m = 1, 2, 3,
d_min = 2, h = 8, tau = 0.1, top-p 0.95, T = 0.6 on code and 1.0 on HMMT (V1 App. C.1).

Command to run (start the server first, either one; GPT_OSS_20B_DIR is the HF checkpoint dir
holding tokenizer.json and the chat template):
    vllm serve openai/gpt-oss-20b --max-logprobs 20 --generation-config vllm
    python -m sglang.launch_server --model-path openai/gpt-oss-20b --port 8000
then, per benchmark:
    export GPT_OSS_20B_DIR=/path/to/gpt-oss-20b
    prd-jax eval --config configs/eval/gptoss20b_v1_infer.py:codecontests --workdir runs/gptoss20b_v1_cc
    prd-jax eval --config configs/eval/gptoss20b_v1_infer.py:livecodebench_v5 --workdir runs/gptoss20b_v1_lcb5
    prd-jax eval --config configs/eval/gptoss20b_v1_infer.py:livecodebench_v6 --workdir runs/gptoss20b_v1_lcb6
    prd-jax eval --config configs/eval/gptoss20b_v1_infer.py:hmmt_feb2025 --workdir runs/gptoss20b_v1_hmmt
In-graph (the weights from GPT_OSS_20B_DIR or --config.model_path=...):
    prd-jax compile --config configs/eval/gptoss20b_v1_infer.py:codecontests,8xh200
    prd-jax eval --config configs/eval/gptoss20b_v1_infer.py:codecontests,8xh200 --workdir runs/gptoss20b_v1_cc_h200
A forced rating (a judge that wrote no rating tag) reads the server's top 20 log-probabilities
of the next token: vLLM must allow 20 (`--max-logprobs 20`; `backend.rating_top_logprobs`).
`--generation-config vllm` makes vLLM ignore the checkpoint's generation_config.json; each
request sends its sampling anyway (top-k off as -1; backends/endpoints.py). Against SGLang add
`--config.backend.endpoint=sglang` (it returns no token ids: answers are re-encoded).
Request ESTIMATE (`prd-jax compile --estimate` with a stand-in tokenizer: upper bounds, nothing
sent): codecontests 207,400 requests, 2.4e9 prompt and 1.0e9 completion tokens over the five
operators; hmmt_feb2025 36,600 requests, 5.3e8 and 1.8e8 tokens. The in-graph args declare
`target` h200:8 / v5p:4x4x4 / v5p:2x4x4 (v5p-64); every program fits on each: codecontests,8xh200
(largest 35.09 GB per device of 139.93), codecontests,v5p-128 (largest 85.53 of 102.80) and
codecontests,v5p-64 (largest 12.14 of 102.80; docs/results/2026-12-04-aot-fit-5.md). Runtime
ESTIMATE in-graph (`prd-jax compile --estimate`, roofline, a floor), codecontests,8xh200 at 32
rows in flight per call: at most 1.0e9 generated tokens, 18 h; the pod now keeps 4 in flight, so longer.

Expected (paper, V1 §4): "+7.3%: On CodeContests, GPT-OSS-20B improves from 66.06% to 73.33%
with V1-Infer versus pointwise verification." "Other reported gains include +8.6% and +10.0% for
GPT-OSS-20B on LiveCodeBench-v5 and HMMT, respectively." So the baseline is pointwise verification
(`self_pointwise` against `pairwise_v1`); at which budget m each figure is reached is not stated in
the text we have. Summary: "V1-Infer improves Pass@1 by up to 10% over pointwise verification".
For LiveCodeBench v6, and for `long_cot`, the paper gives no GPT-OSS-20B figure in the text we
have (the 76% on LiveCodeBench-v6, its model not named: configs/eval/gptoss20b_v1_vs_rsa.py).
Ours: not yet run.

Open (ours): GPT-OSS writes its reasoning in an analysis channel, not a `</think>` block; a
judge sees a candidate's final channel only (`quote_thinking` is off: the text after
`<|channel|>final<|message|>`, `operators.runner.thinking_marker`; a candidate that never
opened it is quoted whole, head + tail kept); no reasoning level is passed (the chat template's default; V1's released quick-start
uses "medium").
"""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("v1_paper", os.path.join(HERE, "v1_paper.py"))
V1 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(V1)

ARGS = tuple(V1.BENCHMARKS) + ("codecontests,8xh200", "codecontests,v5p-128", "codecontests,v5p-64")
# In-graph pods (ours, like every pod setting), over configs/eval/v1_paper.py's PODS:
# - v5p-64 (issue 34 §4 asks the fit there; 32 chips, topology 2x4x4): the v5p-128 layout at half the
#   fsdp width, the 32 experts 4 per fsdp shard; 2 rows in flight per batch shard (16 per call).
# - 8xh200: 2 rows in flight per batch shard (4 per call), not the Qwen configs' 16.
# With more rows per shard a judge call's prefill overflows a chip (v5p-64 at 8; 8xh200 at 4, as XLA:CPU
# measures it: its `ragged_dot` lowering expands the experts densely); docs/results/2026-12-03-aot-fit-3.md.
POD_OVERRIDES = {"v5p-64": dict(mesh="data=1,fsdp=8,tensor=4", target="v5p:2x4x4", batch_size=8, max_rows=16),
                 "8xh200": dict(max_rows=4)}


def operators(bench: str) -> list:
    return ([V1.long_cot(bench)] + [V1.best_of_n(bench, "pairwise_v1", m=m) for m in V1.BUDGETS]
            + [V1.best_of_n(bench, "self_pointwise")])


def get_config(arg=None):
    bench, _, pod = (arg or "").partition(",")
    try:  # v5p-64 is this config's own pod: the v5p-128 config, re-laid
        bench, backend = V1.parse_arg(f"{bench},v5p-128" if pod == "v5p-64" else arg, __file__)
    except ValueError:
        raise ValueError(f"configs/eval/{os.path.basename(__file__)}: arg {arg!r} unknown; allowed: BENCH or "
                         f"BENCH,BACKEND with BENCH in {tuple(V1.BENCHMARKS)} and BACKEND in "
                         f"{V1.BACKENDS + ('v5p-64',)} (none given: codecontests, remote)") from None
    c = V1.config("gpt-oss-20b", operators(bench), bench, backend)
    over = dict(POD_OVERRIDES.get(pod, {}))
    if "max_rows" in over:
        c.sampling.max_rows = over.pop("max_rows")
    c.update(over)
    return c
