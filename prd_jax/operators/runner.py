"""Host edge of the operators: compile templates, tokenize problems, jit and run.

Strings exist only here: problems are tokenized once, completions decoded once.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax import prompts as P
from prd_jax.operators.calls import strip_thinking
from prd_jax.operators.core import Context, OperatorResult, Problems
from prd_jax.operators.judges import RatingParser, RatingTokens
from prd_jax.operators.registry import operator_for
from prd_jax.operators.specs import Sampling
from prd_jax.tasks.grading import TaskGrouper

log = logging.getLogger(__name__)


THINK_END = "</think>"
# Harmony (GPT-OSS): a completion is `<|channel|>analysis<|message|>...<|end|><|start|>assistant
# <|channel|>final<|message|>...<|return|>`; the analysis channel is the thinking block and
# the final channel's header ends it.
HARMONY_TOKENS = ("<|channel|>", "<|message|>")
HARMONY_FINAL = "<|channel|>final<|message|>"
_BLANKS = ("\n", "\n\n", "\n\n\n", " ", "  ")


def thinking_marker(tokenizer) -> tuple:
    """(end-of-thinking marker ids, newline / space ids to drop after it) of `tokenizer`.

    A harmony tokenizer (GPT-OSS: `<|channel|>` and `<|message|>` are tokens) ends its
    thinking with the final channel's header: the marker is the ids of
    `<|channel|>final<|message|>` (multi-token), so what a later prompt quotes is the final
    channel's text, and a completion that never opened the final channel is kept whole, as
    an unclosed `</think>` block is. Otherwise the marker is `</think>` (Qwen3, DeepSeek-R1
    and other thinking models): its one id
    when the vocabulary has it as a token; else the ids `encode("</think>")` gives, when
    the chat template mentions it (a multi-token marker, matched as that exact id
    sequence, as also for a stand-in tokenizer marked `stand_in_thinking`, which the AOT
    report uses for a thinking model whose tokenizer is not on disk); else none, and quoted
    candidates are never cut. The ids dropped after the
    marker are the single-token encodings of newlines and spaces. Ours: the papers do
    not discuss thinking blocks.
    """
    has = getattr(tokenizer, "token_to_id", None)
    single = has(THINK_END) if has else None
    if has and all(has(t) is not None for t in HARMONY_TOKENS):
        marker = tuple(tokenizer.encode(HARMONY_FINAL))
    elif single is not None:
        marker = (int(single),)
    elif THINK_END in (getattr(tokenizer, "chat_template", None) or "") or getattr(tokenizer, "stand_in_thinking", False):
        marker = tuple(tokenizer.encode(THINK_END))
    else:
        return (), ()
    skip = []
    for text in _BLANKS:
        ids = tokenizer.encode(text)
        if len(ids) == 1 and ids[0] not in skip:
            skip.append(ids[0])
    return marker, tuple(skip)


def answer_texts(tokenizer, tokens, lengths) -> list:
    """The text each row of `tokens [R, N]` (its first `lengths[r]` ids) is graded on: what
    follows its thinking block (`calls.strip_thinking` with `thinking_marker(tokenizer)`:
    Qwen3's `</think>`, GPT-OSS's final channel), or the whole row when it holds no marker
    (a non-thinking model, or a thinking block cut off by the budget), as a quoted candidate
    is cut. A model's answer is graded, not its reasoning (ours: the papers grade final
    answers and say nothing of thinking blocks)."""
    tok, length = np.asarray(tokens), np.asarray(lengths)
    end, skip = thinking_marker(tokenizer)
    if end and tok.shape[0]:
        tok, length = (np.asarray(x) for x in strip_thinking(jnp.asarray(tok), jnp.asarray(length), end, skip))
    return [tokenizer.decode(tok[r, :int(length[r])].tolist()) for r in range(tok.shape[0])]


class CompiledTemplates(dict):
    """{role: CompiledTemplate} of a context. A role missing at compile time but added to the
    set later (`prompts.add_template`, an operator module imported after the context was
    built) is compiled on first use; a role the set lacks raises naming it and the set."""

    def __init__(self, compiled: dict, compile_role, set_name: str):
        super().__init__(compiled)
        self._compile_role, self._set_name = compile_role, set_name

    def __missing__(self, role):
        template = P.TEMPLATE_SETS.get(self._set_name, {}).get(role)
        if template is None:
            raise KeyError(f"template role {role!r} is not in template set {self._set_name!r}; it has "
                           f"{sorted(P.TEMPLATE_SETS.get(self._set_name, self))} (an operator adds its own "
                           "roles with prompts.add_template)")
        self[role] = self._compile_role(template)
        return self[role]

    def __hash__(self):  # held by the (identity-hashed) Context
        return id(self)


def make_context(tokenizer, sampling: Sampling, *, grader=None, grouper=None, kappa: Optional[int] = None,
                 k_max: int = 16, templates="default", trace: bool = False) -> Context:
    """Compile a template set for `tokenizer` into an operator Context.

    `templates`: a set name from `prompts.TEMPLATE_SETS`, or {role: Template} replacing
    roles of the default set. `trace`: operators also return each round's prompts and
    logprobs, for RL. `k_max` / `kappa`: what the spec declares (`OperatorSpec.k_max`,
    `.kappa`). The templates render through the tokenizer's chat template with its
    settings (e.g. `enable_thinking`, `Tokenizer.with_chat_template_vars`); the thinking
    marker comes from `thinking_marker`. `grader` (oracle selectors) and `grouper` (majority
    vote) are host callbacks, usually `tasks.grading.TaskGrader` / `TaskGrouper` of the run's
    task; `grouper` defaults to the math tasks' (normalised final answer).
    """
    set_name = templates if isinstance(templates, str) else "default"
    chosen = P.template_set(set_name)
    if not isinstance(templates, str):
        chosen.update(templates or {})

    def compile_role(t):
        return P.compile_template(tokenizer, t, k_max=k_max, kappa=kappa)

    compiled = CompiledTemplates({role: compile_role(t) for role, t in chosen.items()}, compile_role, set_name)
    think_end, think_skip = thinking_marker(tokenizer)
    return Context(compiled, RatingTokens.from_tokenizer(tokenizer), sampling, tokenizer.pad_id, grader,
                   RatingParser(tokenizer), grouper or TaskGrouper("gsm8k", tokenizer), trace, think_end, think_skip,
                   P.set_domain(set_name))


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


def check_templates(spec, ctx: Context) -> None:
    """Every template role `spec.template_roles()` names is in `ctx` (compiled on demand);
    ValueError naming the operator, the role and the roles the context has."""
    for role in spec.template_roles():
        try:
            ctx.templates[role]
        except KeyError:
            raise ValueError(f"operator {operator_for(spec).name!r} needs template role {role!r}; the context "
                             f"has {sorted(ctx.templates)} (add it with prompts.add_template)") from None


def run(lm, problems: Problems, key, spec, ctx: Context) -> OperatorResult:
    """Dispatch through the operator registry (the eval harness and RL rollouts both call this).

    `key` is one key per problem `[B]` (a problem's result then does not depend on the
    rest of the batch) or a single key, split into B.
    """
    op = operator_for(spec)
    check_templates(spec, ctx)
    b = problems.tokens.shape[0]
    if key.shape != (b,):
        key = jax.random.split(key, b)
    return op.run(lm, problems, key, spec, ctx)


_JITTED = jax.jit(run, static_argnames=("spec", "ctx"))


def run_operator(lm, problems: Problems, key, spec, ctx: Context) -> OperatorResult:
    """Run one operator as one compiled program (cached per spec, context and shapes)."""
    return _JITTED(lm, problems, key, spec=spec, ctx=ctx)
