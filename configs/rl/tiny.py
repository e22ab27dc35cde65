"""RL (CISPO + GRPO advantages + auxiliary SFT, as in the PDR paper §3.3) of the tiny SFT model
on the synthetic modular-arithmetic task (CPU, about a minute).

Command to run (after configs/sft/tiny.py):
    prd-jax train --config configs/sft/tiny.py --workdir /tmp/sft_tiny
    prd-jax train --config configs/rl/tiny.py --workdir /tmp/rl_tiny \
        --config.model.init_workdir=/tmp/sft_tiny

Expected (the paper gives no figure; ours): 46 s on 2 idle CPU cores for the default 10 steps
(measured 2026-11-30) (each: 4 prompts x 8 samples of up to 64 tokens, one CISPO update);
metrics.jsonl shows reward/mean, accuracy, response length, clip fraction, entropy and KL per
step.
"""

import os

import ml_collections

from prd_jax.config_io import load_config
from prd_jax.sampling import Sampling

SFT_TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sft", "tiny.py")


def get_config(arg=None):
    c = load_config(SFT_TINY)  # same model, tokenizer and task as the SFT stage
    c.stage = "rl"
    c.model.init = "checkpoint"
    c.model.init_workdir = ""  # the SFT run's workdir
    c.data.num_train = 512
    c.batch_size = 32  # unused by RL: a step's rows are prompts_per_step * samples_per_prompt
    c.rl = ml_collections.ConfigDict(dict(
        prompts_per_step=4, samples_per_prompt=8, max_prompt_tokens=256, max_new_tokens=64,
        advantage="grpo", loss="cispo", eps_low=0.2, eps_high=0.28,
        aggregation="token_mean", kl_coef=0.0, aux_sft_coef=0.1, updates_per_batch=1,
        # operator-consistent RL (configs/rl/tiny_pdr.py) and V1 verification (tiny_pairrl.py) are off here
        operator_fraction=0.0, operator=None, gradient_targets="refine", verifier="none", verifier_coef=1.0,
        verifier_threshold=0.2, verifier_pairs_per_prompt=4, verifier_max_new_tokens=32,
        verifier_candidate_max_tokens=64, seed_offset=0, templates=c.data.templates))
    # how rollouts, operator and verifier calls sample (T = 1.0, top-p 1.0, PDR paper §4), and the
    # sampler's cost options (none changes a row's tokens): the one sampling config, prd_jax.sampling.Sampling
    c.sampling = Sampling(temperature=1.0, top_p=1.0).to_config()
    c.optim.learning_rate = 1e-4
    c.optim.warmup_steps = 0
    c.optim.decay_steps = 10
    c.optim.schedule = "constant"
    c.steps = 10
    c.checkpoint_every = 5
    c.eval_every = 0
    return c
