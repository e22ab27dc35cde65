"""Host edge of the operators: compile templates, tokenize problems, jit and run.

Strings exist only here: problems are tokenized once, completions decoded once.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.operators import prompts as P
from prd_jax.operators.core import OPERATORS, Context, OperatorResult, Problems
from prd_jax.operators.judges import RatingParser, RatingTokens
from prd_jax.operators.population import POPULATION_OPERATORS
from prd_jax.operators.specs import Sampling

log = logging.getLogger(__name__)


THINK_END = "</think>"
_BLANKS = ("\n", "\n\n", "\n\n\n", " ", "  ")


def thinking_marker(tokenizer) -> tuple:
    """(end-of-thinking marker ids, newline / space ids to drop after it) of `tokenizer`.

    The marker is `</think>` (Qwen3, DeepSeek-R1 and other thinking models): its one id
    when the vocabulary has it as a token; else the ids `encode("</think>")` gives, when
    the chat template mentions it (a multi-token marker, matched as that exact id
    sequence); else none, and quoted candidates are never cut. The ids dropped after the
    marker are the single-token encodings of newlines and spaces. Ours: the papers do
    not discuss thinking blocks.
    """
    single = tokenizer.token_to_id(THINK_END) if hasattr(tokenizer, "token_to_id") else None
    if single is not None:
        marker = (int(single),)
    elif THINK_END in (getattr(tokenizer, "chat_template", None) or ""):
        marker = tuple(tokenizer.encode(THINK_END))
    else:
        return (), ()
    skip = []
    for text in _BLANKS:
        ids = tokenizer.encode(text)
        if len(ids) == 1 and ids[0] not in skip:
            skip.append(ids[0])
    return marker, tuple(skip)


def make_context(tokenizer, sampling: Sampling, *, grader=None, kappa: Optional[int] = None,
                 k_max: int = 16, templates="default", trace: bool = False) -> Context:
    """Compile a template set for `tokenizer` into an operator Context.

    `templates`: a set name from `prompts.TEMPLATE_SETS`, or {name: Template} replacing
    entries of the default set. `trace`: operators also return each round's prompts and
    logprobs, for RL. The templates render through the tokenizer's chat template with its
    settings (e.g. `enable_thinking`, `Tokenizer.with_chat_template_vars`); the thinking
    marker comes from `thinking_marker`.
    """
    if isinstance(templates, str):
        chosen = P.template_set(templates)
    else:
        chosen = P.template_set("default")
        chosen.update(templates or {})
    compiled = {name: P.compile_template(tokenizer, t, k_max=k_max, kappa=kappa) for name, t in chosen.items()}
    think_end, think_skip = thinking_marker(tokenizer)
    return Context(compiled, RatingTokens.from_tokenizer(tokenizer), sampling, tokenizer.pad_id, grader,
                   RatingParser(tokenizer), AnswerGrouper(tokenizer), trace, think_end, think_skip)


def encode_problems(tokenizer, problems: Sequence[str], answers: Sequence[str],
                    max_problem_tokens: int, width: Optional[int] = None):
    """Tokenize problems and gold answers into a `Problems` batch.

    Problems longer than `max_problem_tokens` are skipped: returns (Problems of the kept
    ones, kept indices, {index: reason} for the skipped ones).
    """
    kept, skipped, rows, golds = [], {}, [], []
    for i, (text, answer) in enumerate(zip(problems, answers)):
        ids = tokenizer.encode(text)
        if len(ids) > max_problem_tokens:
            skipped[i] = f"problem has {len(ids)} tokens > max_problem_tokens={max_problem_tokens}"
            continue
        kept.append(i)
        rows.append(ids)
        golds.append(tokenizer.encode(str(answer))[:64])
    width = width or max([len(r) for r in rows] + [1])
    gold_width = max([len(g) for g in golds] + [1])

    def pad(seqs, w):
        arr = np.full((max(len(seqs), 1), w), tokenizer.pad_id, np.int32)
        for j, s in enumerate(seqs):
            arr[j, :len(s)] = s
        return jnp.asarray(arr), jnp.asarray([len(s) for s in seqs] or [0], jnp.int32)

    tok, length = pad(rows, width)
    ans, ans_len = pad(golds, gold_width)
    return Problems(tok, length, ans, ans_len), kept, skipped


class MathGrader:
    """Oracle grading on the host: decode candidate and gold, compare with math-verify."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def correct(self, cand_tok, cand_len, ans_tok, ans_len):
        from prd_jax.rewards.math import grade

        out = []
        for ct, cl, at, al in zip(np.asarray(cand_tok), np.asarray(cand_len), np.asarray(ans_tok), np.asarray(ans_len)):
            text = self.tokenizer.decode(ct[:cl].tolist())
            gold = self.tokenizer.decode(at[:al].tolist())
            out.append(bool(grade(text, gold)))
        return np.asarray(out, bool)


class AnswerGrouper:
    """Host side of majority vote: id of the first candidate with the same extracted,
    normalized final answer `[B, N]` (-1: no answer)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, cand_tok, cand_len):
        from prd_jax.rewards.math import extract_answer, normalize_answer

        cand_tok, cand_len = np.asarray(cand_tok), np.asarray(cand_len)
        out = np.full(cand_len.shape, -1, np.int32)
        for b in range(cand_len.shape[0]):
            first = {}
            for i in range(cand_len.shape[1]):
                answer = extract_answer(self.tokenizer.decode(cand_tok[b, i, :cand_len[b, i]].tolist()))
                if answer is not None:
                    out[b, i] = first.setdefault(normalize_answer(answer), i)
        return out


ALL_OPERATORS = {**OPERATORS, **POPULATION_OPERATORS}


def run(lm, problems: Problems, key, spec, ctx: Context) -> OperatorResult:
    """Dispatch on the spec's type (the eval harness and RL rollouts both call this).

    `key` is one key per problem `[B]` (a problem's result then does not depend on the
    rest of the batch) or a single key, split into B.
    """
    b = problems.tokens.shape[0]
    if key.shape != (b,):
        key = jax.random.split(key, b)
    if type(spec) not in ALL_OPERATORS:
        raise ValueError(f"unknown operator spec {type(spec).__name__}; "
                         f"allowed: {[t.__name__ for t in ALL_OPERATORS]}")
    return ALL_OPERATORS[type(spec)](lm, problems, key, spec, ctx)


_JITTED = jax.jit(run, static_argnames=("spec", "ctx"))


def run_operator(lm, problems: Problems, key, spec, ctx: Context) -> OperatorResult:
    """Run one operator as one compiled program (cached per spec, context and shapes)."""
    return _JITTED(lm, problems, key, spec=spec, ctx=ctx)
