"""`config.rollout.placement="split"` on several processes: 2 processes x 2 CPU devices against
1 process x 4 devices (issue 48 §2). By the split rule each process gives its first device to
sampling and its second to training (one process: devices 0-1 sample, 2-3 train), so both
layouts sample on a data=2 mesh and train on another; the launcher and tolerances are
tests/test_multiprocess.py's (gloo all-reduce against in-process sums). Also with a float8
cache, whose decoupled loss adds the proximal forward."""

import os

import pytest

from test_multiprocess import CONFIGS, MODEL, assert_same_run, run_both

pytestmark = pytest.mark.slow  # launches jax.distributed processes

SPLIT = MODEL + ["--config.model.init=random", "--config.data.num_train=64", "--config.rl.max_new_tokens=16",
                 "--config.rl.prompts_per_step=2", "--config.rl.samples_per_prompt=2",
                 "--config.optim.weight_decay=0.0", "--config.steps=2", "--config.checkpoint_every=2",
                 "--config.rollout.placement=split"]


@pytest.mark.parametrize("extra", [(), ("--config.sampling.kv_cache_dtype=float8_e4m3fn",)],
                         ids=["bf16", "float8_decoupled"])
def test_split_on_two_processes_equals_one_process(tmp_path, extra):
    """With a float8 cache the decoupled loss's forward (`train.policy_logp`) runs too: every
    process places the whole host batch and reads back the global log-probabilities."""
    args = ["train", "--config", os.path.join(CONFIGS, "rl", "tiny.py"), "--no-progress", *SPLIT, *extra]
    single, multi, _ = run_both(tmp_path, "split", args)
    la = assert_same_run(single, multi, 2, "split")
    assert all(m["grad_norm"] > 0 and m["response_length"] > 0 for m in la)
    if extra:
        assert all(m["behaviour_weight"] > 0 and m["time/prox_logp_s"] > 0 for m in la)
