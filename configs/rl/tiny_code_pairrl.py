"""V1-PairRL (V1 paper §5) on code: HumanEval problems, generator reward from the sandbox
(`tasks.humaneval`, `rewards.code.evaluate_many`), pairwise verifier rows on the "code" template
set's pairwise prompt with the threshold reward (0.2), as configs/rl/tiny_pairrl.py does for math.

The model is SmolLM2-135M's architecture shrunk to 2 layers of width 64, randomly initialised,
with SmolLM2's real tokenizer (a pipeline check: it writes no programs, so rewards are 0 and
strict pairing finds no pairs; point `model.init=pretrained` and real sizes at it for a real run).
`rl.code_reward`: "fraction" (tests passed / total, the default) or "all_pass".

Command to run:
    prd-jax train --config configs/rl/tiny_code_pairrl.py --workdir /tmp/rl_code_pairrl

Expected (the paper gives no figure; ours): 2 steps in 3m00s with compilation on 2 busy, shared
CPU cores (2026-12-01, measured before max_prompt_tokens went from 320 to 288); metrics.jsonl
has reward/standard, verifier/reward (0.0 here: no strict pairs) and the rest of the PairRL
metrics.
"""

import os

import ml_collections

from prd_jax.config_io import load_config
from prd_jax.train.operator_rl import PAIRRL_OBJECTIVE

RL_TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny.py")


def get_config(arg=None):
    c = load_config(RL_TINY)
    c.task = "humaneval"  # problems, reward and prompts (tasks.get_task)
    c.tokenizer = "model"
    c.model = ml_collections.ConfigDict(dict(
        name="smollm2-135m", path="", init="random", init_workdir="",
        overrides=dict(hidden=64, intermediate=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                       max_position=2048)))
    c.split = "test"  # HumanEval has one split
    c.data.num_train = 24  # the first 24 problems; those whose prompt exceeds max_prompt_tokens are skipped
    c.data.templates = "code"
    c.rl.update(PAIRRL_OBJECTIVE)
    c.rl.templates = "code"
    c.rl.code_reward = "fraction"
    c.rl.prompts_per_step = 2
    c.rl.samples_per_prompt = 4
    c.rl.max_prompt_tokens = 288
    c.rl.max_problem_tokens = 192  # problem width quoted in verifier prompts
    c.rl.max_new_tokens = 16
    c.rl.minibatches = 1
    c.rl.verifier_pairs_per_prompt = 2
    c.rl.verifier_max_new_tokens = 8
    c.rl.verifier_candidate_max_tokens = 32
    c.sampling.temperature = 0.6  # V1 §4: code sampling
    c.steps = 2
    c.checkpoint_every = 2
    c.optim.decay_steps = 2
    return c
