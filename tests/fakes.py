"""Fakes shared by the operator tests: a one-token-per-character tokenizer with a trivial
chat template, and a grader that compares first tokens."""

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
