"""Adaptive PDR (issue 37) against fixed PDR rounds and Long-CoT with SmolLM2-135M-Instruct on a
slice of GSM8K test (CPU): the Pareto curves (accuracy against B_total and B_seq) of
`summary.md` / `pareto.png`.

Everything but the operators is configs/eval/smollm2_gsm8k.py. Rows: Long-CoT at 96 / 192 /
384 tokens; fixed PDR (M, 1) with M = 2, 4, 8 drafts of 96 tokens, a shared top-2 ranked by
answer agreement (`majority`) and one refine; adaptive PDR with the same drafts, workspace and
refine over 8 draft slots in 3 waves (2, then up to 3, then up to 3 while the drafts disagree)
at tau = 0.25, 0.5, 0.75 and 1.0 (the largest answer group's share at which a problem stops).
The adaptive rows do not share PDR's sampling keys here (each operator has its own), so read
the curves, not row-by-row differences; the demo's claim pairs them (docs/demo.md).

Command to run:
    prd-jax eval --config configs/eval/adaptive_pdr_gsm8k.py --workdir runs/adaptive_pdr_gsm8k \
        --config.num_problems=32

Expected: the paper gives no figure (it has no adaptive schedule). Ours: the 32-problem run is not
yet made; on the first 8 problems (partial, docs/results/2026-12-03-adaptive-pdr-2.md) Long-CoT and
fixed PDR score 0/8 at every budget, so the curves cannot rise on SmolLM2-135M; adaptive PDR at
tau = 0.25 stops every problem after its first 2 drafts (one answered draft of 2 is a share of 1/2),
B_total about 190 against PDR (8, 1)'s about 840. The point is the budget accounting on a real
model and tokenizer.
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
BUDGET = 96
QUOTE = dict(max_new_tokens=BUDGET, candidate_max_tokens=BUDGET, truncation_head=32)
TAUS = (0.25, 0.5, 0.75, 1.0)


def get_config(arg=None):
    c = load_config(os.path.join(HERE, "smollm2_gsm8k.py"))
    c.num_problems = 32
    c.batch_size = 8
    ops = [dict(type="long_cot", max_new_tokens=b) for b in (BUDGET, 2 * BUDGET, 4 * BUDGET)]
    ops += [dict(type="pdr", schedule=(m, 1), distill="shared_topk", k=2, selector="majority", kappa=64, **QUOTE)
            for m in (2, 4, 8)]
    ops += [dict(type="adaptive_pdr", waves=3, min_fanout=2, max_fanout=3, tau=tau, k=2, signal="majority", **QUOTE)
            for tau in TAUS]
    c.operators = ops
    return c
