"""What every operator shares: the problem batch, the static context, the result, and
`make_result`.

An operator is a pure function `(lm, problems, keys, spec, ctx) -> OperatorResult` in its own
module, beside its spec class (`long_cot.py`, `sr.py`, `pdr.py`, `best_of_n.py`, `rsa.py`,
`adaptive_pdr.py`), registered with `registry.register_operator`. `keys` holds one PRNG key
per problem, so each problem's result is independent of the batch it runs in (use
`runner.run`, which also accepts one key and splits it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax
import jax
import jax.numpy as jnp

from prd_jax.operators.budget import CallLog
from prd_jax.operators.specs import Sampling

Array = jax.Array


@flax.struct.dataclass
class Problems:
    """A batch of tokenized problems (right-padded) and their gold answers (for oracles)."""

    tokens: Array
    lengths: Array
    answer_tokens: Array
    answer_lengths: Array


@dataclasses.dataclass(frozen=True, eq=False)
class Context:
    """Static, per-tokenizer pieces: compiled templates, rating tokens, host callbacks.

    `parser` reads judge rating tags from decoded text, `answer_ids` groups candidates by
    extracted answer (majority vote), `grader` grades against gold (oracle selectors).
    `think_end` holds the end-of-thinking marker's token ids (() : the tokenizer has no
    thinking block, nothing is stripped) and `think_skip` the newline / space ids dropped
    after it (`calls.strip_thinking`; `runner.thinking_marker` reads both from a tokenizer).
    `templates` maps a role ("solve", "pdr_topk", "pairwise", ...) to its compiled template.
    """

    templates: dict
    ratings: Any
    sampling: Sampling
    pad_id: int = 0
    grader: Any = None  # host object with .correct(cand_tok, cand_len, ans_tok, ans_len) -> bool[R]
    parser: Any = None  # host callable (tokens, lengths, *, tags) -> int32 [R, T], 0 = missing
    answer_ids: Any = None  # host callable (cand_tok [B, N, L], cand_len [B, N]) -> int32 [B, N]
    trace: bool = False  # return each round's prompts and logprobs (RL rollouts)
    think_end: tuple = ()
    think_skip: tuple = ()
    domain: str = ""  # the template set's domain (prompts.SET_DOMAINS); a Judge.domain must match it


@flax.struct.dataclass
class OperatorResult:
    """Final completions, every call's budget record (`calls`, with the candidates each judge
    call rated and its ratings: `budget.py`), the final call's workspace (left-padded,
    `workspace_lengths` valid tokens at the end), and the number of judge calls whose rating
    tags did not parse and were forced (`judges.py`)."""

    final_tokens: Array
    final_lengths: Array
    calls: CallLog
    workspace_tokens: Array
    workspace_lengths: Array
    truncations: Array
    round_tokens: tuple
    round_lengths: tuple
    judge_unparsed: Array
    round_traces: tuple = ()  # RoundTrace per round when Context.trace (Long-CoT, SR, PDR)

    @property
    def b_seq(self) -> Array:
        return self.calls.b_seq

    @property
    def b_total(self) -> Array:
        return self.calls.b_total

    @property
    def b_seq_io(self) -> Array:
        return self.calls.b_seq_io

    @property
    def b_total_io(self) -> Array:
        return self.calls.b_total_io


def make_result(final_t, final_l, calls, workspace, truncs, rounds_t, rounds_l, unparsed=None,
                traces=()) -> OperatorResult:
    """An OperatorResult with int32 counters (shared by every operator)."""
    b = final_t.shape[0]
    unparsed = jnp.zeros((b,), jnp.int32) if unparsed is None else unparsed.astype(jnp.int32)
    return OperatorResult(final_t, final_l, calls, workspace[0], workspace[1], truncs.astype(jnp.int32),
                          tuple(rounds_t), tuple(rounds_l), unparsed, tuple(traces))


def empty_workspace(b: int):
    """The workspace of an operator that has none: one pad token, length 0, per problem."""
    return jnp.zeros((b, 1), jnp.int32), jnp.zeros((b,), jnp.int32)
