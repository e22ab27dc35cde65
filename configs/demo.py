"""The main demo job (`make demo`): a tiny decoder trained from scratch on CPU, end to end.

1. SFT from scratch on the synthetic modular-arithmetic task (single-pass and PDR-format
   traces, prd_jax/data/synthetic.py);
2. from the SFT checkpoint, baseline RL (configs/rl/tiny.py) and, separately, PDR-RL
   (configs/rl/tiny_pdr.py) with the same number of steps and prompts per step;
3. each checkpoint evaluated on held-out problems with Long-CoT, SR, PDR and V1 best-of-N
   at roughly matched B_seq;
4. `results.md` (tables with B_seq and B_total) and `pareto.png` in the workdir.

Command to run:
    prd-jax demo                      # workdir ./demo_workdir; rerun resumes
    prd-jax demo --workdir /tmp/demo --config.quick=True   # smoke version (2m38s measured)

Expected: measured 27m24s on 2 CPU cores shared with a full test-suite run (2026-11-30);
not yet timed on an idle machine, where the target is 15 minutes (README, "What you should see").
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
