"""Adaptive PDR's Pareto sweep on the demo task (issue 37): `prd-jax demo` with more points.

The demo config (configs/demo.py) plus, at every checkpoint, adaptive PDR at tau = 0.125,
0.25, 0.5 and 1.0 (each run with the demo PDR's sampling keys, one eval pass each) and fixed
PDR rounds (2, 1) and (4, 1) beside the demo's (8, 1); `pareto.png` then shows adaptive PDR's
curve against the fixed schedules and Long-CoT's. `operators` lists the entries the sweep adds
(for reading; the demo builds them from `pareto_taus` / `pareto_drafts`).

Command to run (a workdir of a finished demo resumes: only the new rows are evaluated):
    prd-jax demo --config configs/eval/adaptive_pdr_demo.py --workdir demo_workdir

Expected: the paper gives no figure (adaptive PDR is ours); our measured points are in the dated
adaptive PDR record under docs/results.
"""

import os

from prd_jax.config_io import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TAUS = (0.125, 0.25, 0.5, 1.0)
DRAFTS = (2, 4)


def get_config(arg=None):
    from prd_jax import demo

    c = load_config(os.path.join(ROOT, "configs", "demo.py"))
    c.pareto_taus = TAUS
    c.pareto_drafts = DRAFTS
    added = {**demo.adaptive_operators(c), **demo.eval_operators(c)}
    c.operators = [entry for name, entry in added.items() if "@" in name and not name.startswith("long_cot")]
    return c
