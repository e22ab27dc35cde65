"""Adaptive PDR (issue 37) with o3-mini through the OpenAI API (the remote backend): Pareto
curves of adaptive PDR at several tau against fixed PDR (M, 1) rounds on AIME 2024 or 2025.

Everything but the operators is the o3-mini Fig. 3 config (configs/eval/api_rows.py: backend,
chat API, max_completion_tokens, key from OPENAI_API_KEY, mean@16, the request cache that
makes a rerun pay nothing twice). Rows, 8k completion tokens per call: Long-CoT at 8k and 16k;
fixed PDR (4, 1) and (8, 1), shared top-2 ranked by answer agreement (`majority`: no judge
calls to pay for); adaptive PDR over 8 draft slots (2 drafts, then up to 3 and 3 more where
the drafts disagree) at tau = 0.5, 0.75 and 1.0. Drafts a problem does not need are never
requested, so the bill follows B_total (`remote_lm`: rows that are not live send nothing).

Command to run (the arg picks the year: aime2024 or aime2025; none given: aime2024):
    export OPENAI_API_KEY=...
    prd-jax compile --estimate --config configs/eval/adaptive_pdr_o3mini.py:aime2024
    prd-jax eval --config configs/eval/adaptive_pdr_o3mini.py:aime2024 --workdir runs/adaptive_pdr_o3mini_2024

Expected: the paper gives no figure (adaptive PDR is ours); not yet run. `--estimate` prices every row at its full fan-out (an upper
bound for the adaptive rows).
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = ("aime2024", "aime2025")
QUOTE = dict(max_new_tokens=8192, candidate_max_tokens=4096, truncation_head=1024)


def get_config(arg=None):
    c = load_config(f"{os.path.join(HERE, 'api_rows.py')}:o3mini,fig3,{arg or 'aime2024'}")
    ops = [dict(type="long_cot", max_new_tokens=b) for b in (8192, 16384)]
    ops += [dict(type="pdr", schedule=(m, 1), distill="shared_topk", k=2, selector="majority", **QUOTE) for m in (4, 8)]
    ops += [dict(type="adaptive_pdr", waves=3, min_fanout=2, max_fanout=3, tau=tau, k=2, signal="majority", **QUOTE)
            for tau in (0.5, 0.75, 1.0)]
    c.operators = ops
    return c
