"""Fakes shared by the operator tests: a one-token-per-character tokenizer with a trivial
chat template, and a grader that compares first tokens."""

import os
import signal
import subprocess
import time

import numpy as np


class CharTokenizer:
    """One token per character (id = ord % 200 + 3); chat template 'U:<content>\\nA:'.
    `chat_template` is only inspected (thinking-marker lookup), never rendered."""

    pad_id = 0

    def __init__(self, template=""):
        self.chat_template = template

    def encode(self, text, add_bos=False):
        return [ord(c) % 200 + 3 for c in text]

    def decode(self, ids, skip_special=True):
        return "".join(chr(i - 3) for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return "U:" + messages[0]["content"] + ("\nA:" if add_generation_prompt else "")


class FirstTokenGrader:
    """A candidate is correct iff its first token equals the gold's first token."""

    def correct(self, cand_tok, cand_len, ans_tok, ans_len):
        return np.asarray(cand_tok)[:, 0] == np.asarray(ans_tok)[:, 0]


class RolloutState:
    """What an RL stage's `next_batch` reads of the train state: its params and rng."""

    def __init__(self, params, rng):
        self.params, self.rng = params, rng


def spread_rewards(texts, keys) -> list:
    """Grades with spread for a random tiny model (never right): reward = parity of the text's
    length, so groups have strict pairs and nonzero advantages."""
    return [{"reward": float(len(t) % 2), "correct": float(len(t) % 2)} for t in texts]


def tiny_eval(operators: list) -> tuple:
    """(config, model, rows) of a cheap eval: a random tiny model (CharVocab) on two synthetic
    problems, k = 2, with `operators` (for `prd_jax.evaluate.evaluate(config, w, model=, rows=)`)."""
    import types

    import jax
    import ml_collections

    from prd_jax.data import synthetic
    from prd_jax.model.config import NAMED_CONFIGS
    from prd_jax.model.decoder import init_params

    cfg = NAMED_CONFIGS["tiny"].replace(vocab_size=128, max_position=512)
    model = types.SimpleNamespace(cfg=cfg, params=init_params(cfg, jax.random.key(0)),
                                  tokenizer=synthetic.CharVocab(), mesh=None)
    config = ml_collections.ConfigDict(dict(
        task="gsm8k", model="tiny", seed=0, k_samples=2, batch_size=2, num_problems=2,
        sampling=dict(temperature=1.0, top_p=1.0, top_k=0), max_problem_tokens=64, templates="compact",
        operators=operators))
    return config, model, synthetic.generate(2, 0, 1)


def kill_mid_run(cmd: list, env: dict, cwd: str, workdir: str, lines: int) -> int:
    """Start `cmd` (a training run into `workdir`), SIGKILL it once its metrics.jsonl has
    `lines` lines (or it ended, or 600 s passed); returns the lines written by then."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    metrics = os.path.join(workdir, "metrics.jsonl")
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= lines:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return sum(1 for _ in open(metrics))
