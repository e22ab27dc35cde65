"""The main demo job (`make demo`): a tiny decoder trained from scratch on CPU, end to end.

1. SFT from scratch on the synthetic modular-arithmetic task (single-pass, PDR, SR and
   pairwise-judge traces on the compact prompt set, configs/sft/tiny.py);
2. from the SFT checkpoint, baseline RL (configs/rl/tiny.py) and, separately, PDR-RL
   (configs/rl/tiny_pdr.py) with the same number of steps and prompts per step;
3. each checkpoint evaluated with Long-CoT, SR, PDR and V1 best-of-N on problems whose text
   no training stage saw (`synthetic.held_out`), with the same sampling keys per problem;
4. `results.md` (a paired claims table, then per-checkpoint tables with B_seq and B_total),
   `results.json` and `pareto.png` in the workdir.

Command to run:
    prd-jax demo                      # workdir ./demo_workdir; rerun resumes
    prd-jax demo --workdir /tmp/demo --config.quick=True   # smoke version (tests/test_demo.py)

Expected: 13m04s wall on 2 idle CPU cores (2026-11-30): SFT 5m40s, baseline RL 1m02s, PDR-RL
2m29s, evaluation of the three checkpoints 3m40s (README, "What you should see").
"""

import ml_collections


def get_config(arg=None):
    c = ml_collections.ConfigDict()
    c.quick = False
    c.seed = 0
    c.difficulty = (1, 2)
    c.sft_steps = 600
    c.rl_steps = 32
    c.rl_learning_rate = 1e-4
    c.eval_problems = 256
    c.eval_batch = 16
    c.eval_temperature = 1.0  # PDR's drafts need diversity; every operator samples at this temperature
    c.budget = 64  # per-call generation budget of SR / PDR / best-of-N calls; Long-CoT gets 2x
    # --config.quick=True: the smoke version (tests/test_demo.py): a 1-layer model and these values
    c.quick_overrides = dict(sft_steps=4, rl_steps=1, eval_problems=4, eval_batch=4, budget=16)
    c.num_train = 4000  # distinct SFT problems (each with its traces, configs/sft/tiny.py) and RL prompts
    return c
