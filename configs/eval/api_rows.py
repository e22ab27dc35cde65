"""Shared builder of the PDR paper's API rows (arXiv 2510.01123 §4: Fig. 3, Table 1, Table 2,
Fig. 5, Fig. 6; App. E / Table 4), for the providers the paper's inference study calls
(o3-mini, gemini-2.5-flash).

Not a config of its own: the eval configs `configs/eval/o3mini_*.py` and
`configs/eval/gemini25flash_*.py` are a few lines each around `config(provider, row, arg,
path)`. `get_config` here raises, and `ARGS = ()` documents no arg, so the config tests
(which enumerate each file's ARGS) find no case to load for this file.

Command to run (each config built here; the arg picks the AIME year, default aime2024):
    export OPENAI_API_KEY=...    # o3mini_*.py       (GEMINI_API_KEY for gemini25flash_*.py)
    prd-jax eval --config configs/eval/o3mini_fig3_matched_bseq.py:aime2024 --workdir runs/o3mini_fig3_2024

What every row shares, as the paper sets it: mean@16 on the 30 AIME problems of the chosen
year, sampling T = 1.0, top-p 1.0 (o3-mini takes no temperature / top-p:
`endpoint="openai_reasoning"` leaves them out, and sends the budget as
max_completion_tokens; backends/endpoints.py), PDR with k = 2.

Budget ladders and the paper's point. Fig. 3's o3-mini point is at B_seq 49k (paper §4.1,
Fig. 3: "At Bseq 49k, o3-mini accuracy rises from 76.9 (Long CoT) to 81.5 (SR) and 86.7
(PDR)"; App. D.2 for AIME 2025: 73.5, 77.1, 82.9). A call's budget covers hidden reasoning
(o3-mini's max_completion_tokens, Gemini's max_tokens), so the ladders go up to each API's
published output limit (`PROVIDERS[...]["max_call"]`):
- o3-mini: 100,000 max output tokens (OpenAI's model page for o3-mini,
  platform.openai.com/docs/models/o3-mini: "200,000 context window and 100,000 max output
  tokens");
- gemini-2.5-flash: 65,536 output tokens on Google's model page
  (ai.google.dev/gemini-api/docs/models); gateways list 65,535 (Vercel AI Gateway, Replicate's
  max_output_tokens), so we use 65,535, valid under both. Its thinking budget is capped at
  24,576 (ai.google.dev/gemini-api/docs/thinking: 2.5 Flash takes 0-24,576), so
  `thinking_budget` is that cap: a call of budget B may think min(B, 24,576) tokens.
The 49k point (3 x 16,384 = 49,152 tokens on the accepted path) is where `fig3` puts its
16k-per-call rows: Long-CoT at 49,152; SR (2 refinements, 3 calls) and PDR (8, 4, 1) at 16,384
per call; PDR (16, 8, 4, 1) at 12,288 per call (4 calls). A model-ranked top-k adds the accepted
candidate's rating call per round on the path (`b_seq`; `b_seq_no_judge` without it).

Ours, not the paper's:
- the budget grids (Long-CoT 8k..64k; SR / PDR at 8k and 16k per call, 16k for Table 2, 8k for
  Table 1, Fig. 5, Fig. 6 and Table 4), the kappa of 2048 summary tokens, and quoting at most
  4096 tokens of a candidate (head 1024 + tail);
- the model ranker of shared / per-sample top-k: `self_pointwise` with up to 4096 tokens per
  rating call. Both providers bill hidden reasoning inside a call's budget, so a small
  rating budget would often end before any visible rating is written. Neither endpoint
  returns log-probabilities (backends/endpoints.py), so a judge's forced rating reads the
  digit the model writes, within `backend.rating_max_tokens` (1024, reasoning included);

Tokens: o3-mini's `max_completion_tokens` and Gemini's budget both cover hidden reasoning;
a call that reasons past its budget returns no text. summary.md counts such requests per
operator ("requests empty" / "requests length"); B_seq / B_total are the tokens the server
billed (`usage`), hidden reasoning included.

Tokenizer: chat mode still quotes answers by token count, with a local tokenizer. Neither
provider's tokenizer exists locally, so `backend.tokenizer` defaults to "" and the SmolLM2
tokenizer that ships with the package is used (through `model`, see `config`). For counts
closer to o3-mini's, pass an o200k-based tokenizer directory, e.g. GPT-OSS's HF dir:
    --config.backend.tokenizer=/path/to/a/tokenizer_dir
Billing never depends on it: budgets come from the server's usage.
"""

import os

import ml_collections

from prd_jax.sampling import Sampling

ARGS = ()  # a helper documents no arg: there is nothing to load here
YEARS = ("aime2024", "aime2025")

# Per provider: `config.backend` (only the fields that differ from `backends.config.default_backend`)
# and the largest per-call budget the provider takes.
PROVIDERS = {
    "o3mini": dict(
        backend=dict(kind="openai", base_url="https://api.openai.com/v1", model="o3-mini", api="chat",
                     api_key_env="OPENAI_API_KEY", endpoint="openai_reasoning", reasoning_effort="",
                     tokenizer=""),  # "": the paper's effort is not stated (API default)
        max_call=100_000),  # max output tokens (module docstring)
    "gemini25flash": dict(
        backend=dict(kind="openai", base_url="https://generativelanguage.googleapis.com/v1beta/openai/",
                     model="gemini-2.5-flash", api="chat", endpoint="gemini", api_key_env="GEMINI_API_KEY",
                     thinking_budget=24576,  # the thinking-budget ceiling of gemini-2.5-flash
                     tokenizer=""),
        max_call=65_535),  # output tokens, thinking included (module docstring)
}

QUOTE = dict(candidate_max_tokens=4096, truncation_head=1024)
RANKER = dict(selector="self_pointwise", judge=dict(domain="math", max_new_tokens=4096))
KAPPA = 2048


PAPER_POINT = 49152  # Fig. 3's B_seq 49k: 3 sequential calls of 16,384
LONG_COT_LADDER = (8192, 16384, 24576, 32768, PAPER_POINT, 65536)  # capped at the API's limit
# per-call budgets of the iterative rows: (8k, 16k); (16, 8, 4, 1) has 4 calls, so 12k reaches the point
PER_CALL = {(8, 4, 1): (8192, 16384), (16, 8, 4, 1): (8192, 12288)}


def fig3(max_call: int) -> list:
    """Fig. 3: Long-CoT at 8k..64k (the top rung capped at `max_call`) brackets the B_seq of SR
    (2 refinements) and PDR ((8, 4, 1) / (16, 8, 4, 1), shared top-2 ranked by the model;
    (8, 4, 1) global summary) at 8k and at 16k (12k for 4 rounds) per call; the 16k rows and
    Long-CoT at 49,152 are the paper's B_seq-49k point. Accuracy is read off measured B_seq."""
    ops = [dict(type="long_cot", max_new_tokens=min(b, max_call)) for b in LONG_COT_LADDER]
    ops += [dict(type="sr", rounds=2, max_new_tokens=b, **QUOTE) for b in PER_CALL[(8, 4, 1)]]
    ops += [dict(type="pdr", schedule=s, distill="shared_topk", k=2, max_new_tokens=b, **QUOTE, **RANKER)
            for s, budgets in PER_CALL.items() for b in budgets]
    ops += [dict(type="pdr", schedule=(8, 4, 1), distill="global_summary", kappa=KAPPA, max_new_tokens=b, **QUOTE)
            for b in PER_CALL[(8, 4, 1)]]
    return ops


def fig5(max_call: int) -> list:
    """Fig. 5 (token-matched): SR at 8k per call over 2..12 refinements (B_seq = B_total = 3..13
    calls) spans the B_total of PDR (8, 4, 1) at 8k per call (13 generation calls, 3 on the
    path), global summary and shared top-2; the paper's 2.57x is B_seq(SR) / B_seq(PDR) where
    the SR curve, at PDR's B_total, matches PDR's accuracy."""
    ops = [dict(type="sr", rounds=r, max_new_tokens=8192, **QUOTE) for r in (2, 4, 6, 8, 12)]
    ops.append(dict(type="pdr", schedule=(8, 4, 1), distill="global_summary", kappa=KAPPA, max_new_tokens=8192,
                    **QUOTE))
    ops.append(dict(type="pdr", schedule=(8, 4, 1), distill="shared_topk", k=2, max_new_tokens=8192, **QUOTE,
                    **RANKER))
    return ops


def table4(max_call: int) -> list:
    """Table 4 / App. E: PDR with 4 rounds against 5 rounds at the higher compute (M_1 = 32, the
    paper's; the other round sizes and M_1 = 16 of the 4-round schedule are ours), shared top-2
    ranked by the model, 8k per call."""
    return [dict(type="pdr", schedule=s, distill="shared_topk", k=2, max_new_tokens=8192, **QUOTE, **RANKER)
            for s in ((16, 8, 4, 1), (32, 16, 8, 4, 1))]


def table1(max_call: int) -> list:
    """Table 1: SR (2 refinement rounds, 8k per call) without and with error analysis."""
    return [dict(type="sr", rounds=2, error_analysis=ea, max_new_tokens=8192, **QUOTE) for ea in (False, True)]


def table2(max_call: int) -> list:
    """Table 2: PDR (8, 4, 1), k = 2, 16k per call, with each distill variant: global summary,
    shared top-k and per-sample top-k (ranked by the model) and random-k."""
    common = dict(type="pdr", schedule=(8, 4, 1), k=2, max_new_tokens=min(16384, max_call), **QUOTE)
    return [dict(common, distill="global_summary", kappa=KAPPA),
            dict(common, distill="shared_topk", **RANKER),
            dict(common, distill="per_sample_topk", **RANKER),
            dict(common, distill="random_k", selector="random")]


def fig6(max_call: int) -> list:
    """Fig. 6: PDR (8, 4, 1), 8k per call, whose top-2 workspace admits only drafts the grader
    marks correct / incorrect (an oracle with the gold answer), against random-k."""
    common = dict(type="pdr", schedule=(8, 4, 1), k=2, max_new_tokens=8192, **QUOTE)
    return [dict(common, distill="shared_topk", selector="oracle_correct"),
            dict(common, distill="shared_topk", selector="oracle_incorrect"),
            dict(common, distill="random_k", selector="random")]


ROWS = {"fig3": fig3, "fig5": fig5, "table1": table1, "table2": table2, "fig6": fig6, "table4": table4}


def config(provider: str, row: str, arg, path: str) -> ml_collections.ConfigDict:
    """The eval config of `row` through `provider` on AIME `arg` (None: aime2024). `path` is
    the calling config file, named in the error for an unknown arg."""
    if provider not in PROVIDERS:
        raise ValueError(f"configs/eval/api_rows.py: provider {provider!r} unknown; allowed: {sorted(PROVIDERS)}")
    if row not in ROWS:
        raise ValueError(f"configs/eval/api_rows.py: row {row!r} unknown; allowed: {sorted(ROWS)}")
    year = "aime2024" if arg is None else arg
    if year not in YEARS:
        raise ValueError(f"configs/eval/{os.path.basename(path)}: arg {arg!r} unknown; "
                         f"allowed: {YEARS} (none given: aime2024)")
    p = PROVIDERS[provider]
    c = ml_collections.ConfigDict()
    # No local weights are loaded with a remote backend. `model` only names the tokenizer
    # fallback: with backend.tokenizer empty, SmolLM2's tokenizer (shipped with the package)
    # turns answer text into ids for quoting; budgets and billing come from the API's usage.
    c.model = "smollm2-135m"
    c.model_path = ""
    c.task = year  # the problems and their grading (prd_jax.tasks)
    c.data_dir = ""  # default: $PRD_DATA_DIR, else the user data dir (`prd-jax data get`; docs/data.md)
    c.num_problems = 30
    c.k_samples = 16  # mean@16 (paper); --config.k_samples=4 for a cheaper first pass
    c.batch_size = 10  # problems per operator run; their requests go out together (max_concurrency)
    c.seed = 0
    c.sampling = Sampling(temperature=1.0, top_p=1.0, top_k=0).to_config()
    c.max_problem_tokens = 1024
    c.backend = ml_collections.ConfigDict(dict(p["backend"]))
    c.operators = ROWS[row](p["max_call"])
    return c


def get_config(arg=None):
    """`PROVIDER,ROW,YEAR` (what configs/eval/o3mini_*.py and gemini25flash_*.py pass)."""
    parts = (arg or "").split(",")
    if len(parts) != 3:
        raise ValueError("configs/eval/api_rows.py is a helper: run one of configs/eval/o3mini_*.py or "
                         "configs/eval/gemini25flash_*.py (fig3_matched_bseq, fig5_token_matched, table1_sr, "
                         "table2_distill, fig6_oracle, table4_rounds), "
                         "or pass PROVIDER,ROW,YEAR")
    return config(*parts, path=f"{parts[0]}_{parts[1]}")
