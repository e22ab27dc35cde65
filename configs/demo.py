"""The main demo job (`make demo`): a tiny decoder trained from scratch on CPU, end to end, on a
task where checking a guess is easier than finding one (issue 15; docs/demo.md).

1. SFT from scratch on the synthetic `preimage` search task (`data.preimage`): guess-and-check
   traces, PDR refine traces over quoted drafts (some of which ignore the workspace) and
   pairwise judge traces, on the compact prompt set (configs/sft/tiny.py + `demo.PRESETS`);
2. from the SFT checkpoint, baseline RL (configs/rl/tiny.py) and, separately, PDR-RL
   (configs/rl/tiny_pdr.py) with the same steps, prompts per step and learning rate;
3. each checkpoint evaluated with Long-CoT at several budgets, PDR (eight drafts, the two with
   the most shared answers quoted in the workspace, one refine) and V1 best-of-N on problems
   whose text no training stage saw (`synthetic.held_out`), with the same sampling keys;
4. `results.md` / `results.json` (claims with stable ids, PDR and best-of-N against Long-CoT at
   matched B_seq) and `pareto.png` (accuracy against mean B_seq and B_total) in the workdir.

`--config.task=modchain` runs the control: the modular-chain task, where checking a line is
the same lookup as computing it, through the same pipeline (its own `demo.PRESETS` entry).
`--config.seed` moves every seed: SFT data and init, RL, held-out draw and sampling keys.
`--config.validation=True` evaluates on a second held-out draw (choose settings there, not
on the reported problems).

Command to run:
    prd-jax demo                      # workdir ./demo_workdir; rerun resumes
    prd-jax demo --workdir /tmp/demo --config.quick=True   # smoke version (tests/test_demo.py)
    prd-jax demo --workdir /tmp/control --config.task=modchain

Expected: 11m48s on 2 idle CPU cores from a fresh clone with the environment set up (the
setup adds about 1m15s; docs/results/2026-12-03-quiet-reruns.md). Results per seed in
docs/results/2026-12-01-demo-results.md and docs/results/2026-12-03-adaptive-pdr-2.md.
"""

import ml_collections


def get_config(arg=None):
    c = ml_collections.ConfigDict()
    c.quick = False
    c.task = "preimage"  # or "modchain": the control (demo.PRESETS holds each task's settings)
    c.seed = 0
    c.validation = False  # True: evaluate on a second held-out draw, for choosing settings
    # None: the task's preset (demo.PRESETS); set any of these to override it
    c.difficulty = None
    c.sft_steps = None
    c.budget = None  # per-call generation budget of PDR and best-of-N calls
    c.drafts = None  # M: drafts in PDR's first round (schedule (M, 1))
    c.k = None  # drafts quoted in the workspace (shared top-k)
    c.selector = None  # how the workspace ranks the drafts: "random" or "majority" (the most shared answers)
    c.long_cot_budgets = None  # Long-CoT budgets: >= 3, bracketing PDR's mean B_seq
    # adaptive PDR (issue 37): dict(waves, min_fanout, max_fanout, tau) with min_fanout + (waves - 1) x
    # max_fanout = drafts; it runs with PDR's sampling keys and is claimed against PDR (adaptive_pdr_vs_pdr)
    c.adaptive = None
    c.pareto_taus = ()  # more adaptive PDR points at these taus (one eval pass each): the Pareto sweep
    c.pareto_drafts = ()  # fixed PDR rounds (M, 1) with these M, for the same sweep
    c.rl_steps = 24
    c.rl_learning_rate = 1e-4
    c.eval_problems = 256
    c.eval_batch = 64
    c.eval_temperature = 1.0  # drafts need diversity; every operator samples at this temperature
    c.num_train = None  # SFT problems (each with its traces) and RL prompts
    # --config.quick=True: the smoke version (tests/test_demo.py): a 1-layer model and these values
    c.quick_overrides = dict(sft_steps=4, rl_steps=1, eval_problems=4, eval_batch=4, budget=16, drafts=4, k=2,
                             long_cot_budgets=(8, 16, 32), adaptive=dict(waves=2, min_fanout=2, max_fanout=2, tau=0.5))
    return c
