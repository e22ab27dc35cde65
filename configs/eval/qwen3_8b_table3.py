"""PDR paper Table 3 (arXiv 2510.01123 §4.2, App. B.3): the RL, PDR-RL and continual PDR-RL
policies of Qwen3-8B (configs/rl/qwen3_8b_baseline.py, qwen3_8b_pdr.py,
qwen3_8b_continual_pdr.py) evaluated alike, mean@16 on AIME 2024 (`--config.task=aime2025` for
the other year), T = 1.0 and top-p 1.0 (App. B.3: "Evaluation uses temperature and top-p of
1.0").

Arg `POLICY,POD`: POLICY `rl`, `pdr_rl` or `continual` names the checkpoint kind (the rows are
the same for all three; the kind names the workdir and the paper's row it is compared
with); POD `v5p-128` or `8xh200` (mesh, batch and `prd-jax compile` target, as
configs/eval/aime_pdr_sweep.py). Rows, as the policies were trained (16,384 tokens per call,
thinking not force-closed, quoted candidates capped at 4096, head 1024):
- Long-CoT at 16,384 tokens;
- PDR (4, 1), shared top-2 ranked by the policy (`self_pointwise`, 512 judge tokens): the
  operator PDR-RL trains with (§4.2: "four parallel generations, one round, and two
  candidates forwarded");
- PDR (8, 4, 1), the same workspace: inference may run more rounds than training (§3.3:
  "Training uses one PDR round for stability and cost control, while inference can run
  multiple rounds").
Which operator the paper's Table 3 reports is not in papers/; the three rows are ours.

Which checkpoint: `config.checkpoint` set to the RL config's training workdir, WORKDIR[@STEP]
(its newest step without @STEP; docs/training.md, "Evaluate, export and serve a checkpoint").
The config names no weights (`model_path` ""), so without a checkpoint it stops before loading
anything rather than evaluate the untrained model.

Commands to run (workdirs as the RL configs' commands name them), for each year:
    prd-jax eval --config configs/eval/qwen3_8b_table3.py:rl,v5p-128 --workdir gs://BUCKET/table3_rl --config.checkpoint=gs://BUCKET/rl_baseline
    prd-jax eval --config configs/eval/qwen3_8b_table3.py:pdr_rl,v5p-128 --workdir gs://BUCKET/table3_pdr_rl --config.checkpoint=gs://BUCKET/rl_pdr
    prd-jax eval --config configs/eval/qwen3_8b_table3.py:continual,v5p-128 --workdir gs://BUCKET/table3_continual --config.checkpoint=gs://BUCKET/rl_continual
    prd-jax eval --config configs/eval/qwen3_8b_table3.py:rl,v5p-128 --workdir gs://BUCKET/table3_rl_2025 --config.checkpoint=gs://BUCKET/rl_baseline --config.task=aime2025
Runtime ESTIMATE (`prd-jax compile --estimate`, not measured): at most 1.64e8 generated tokens
per policy and year; roofline 4.4 h on 8xH200 (a floor; v5p-128 not estimated here).

Expected (paper, §4.2 and Table 3), the rows of PDR-RL and continual PDR-RL against RL:
- `pdr_rl`: "PDR RL first improves over baseline by +3.34 points on AIME 2024 and +1.67 points
  on AIME 2025";
- `continual`: "Continual PDR RL yields gains of +5.00 and +4.59 percentage points on AIME 2024
  and AIME 2025, respectively";
- `rl`: the reference; the paper gives no figure for it alone in papers/.
Ours: not yet run (no policy trained).
"""

import os

from prd_jax.config_io import load_config

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = {"rl": "configs/rl/qwen3_8b_baseline.py", "pdr_rl": "configs/rl/qwen3_8b_pdr.py",
            "continual": "configs/rl/qwen3_8b_continual_pdr.py"}  # kind -> the RL config that trains it
PODS = ("v5p-128", "8xh200")
ARGS = tuple(f"{p},{pod}" for p in POLICIES for pod in PODS)
BUDGET = 16384  # the policies' training budget per call (configs/rl/qwen3_8b.py)
WORKSPACE = dict(distill="shared_topk", k=2, selector="self_pointwise",
                 judge=dict(domain="math", max_new_tokens=512, think_budget=256),  # as configs/rl/qwen3_8b_pdr.py
                 max_new_tokens=BUDGET, candidate_max_tokens=4096, truncation_head=1024)


def get_config(arg=None):
    policy, _, pod = (arg or "").partition(",")
    if policy not in POLICIES or pod not in PODS:
        raise ValueError(f"configs/eval/qwen3_8b_table3.py: arg {arg!r} unknown; allowed: POLICY,POD with "
                         f"POLICY one of {list(POLICIES)} and POD one of {list(PODS)}, e.g. 'pdr_rl,v5p-128'")
    c = load_config(f"{os.path.join(HERE, 'aime_pdr_sweep.py')}:{pod}")  # pod, data, sampling, thinking on
    c.model_path = ""  # a trained policy: config.checkpoint names it
    c.operators = [dict(type="long_cot", max_new_tokens=BUDGET),
                   dict(type="pdr", schedule=(4, 1), **WORKSPACE),
                   dict(type="pdr", schedule=(8, 4, 1), **WORKSPACE)]
    return c
