"""`prd-jax compile --estimate` for a remote backend: requests, tokens and cost per operator,
before anything is sent.

Each operator is traced (nothing runs) with an LM that records its calls. A call of R rows
is R requests; its prompt tokens are bounded by R x the padded prompt width, its completion
tokens by R x the call's budget (upper bounds, like the in-graph estimate). A tournament's
judge batch is traced once and counts budget / W times (`aot.programs.eval_estimates`).
Forced-rating reads are requests of one completion token (16 in a chat follow-up turn), or
of `rating_max_tokens` on an endpoint without log-probabilities, where the model writes the
rating (`backends.endpoints`). Cost = tokens x the config's
`price_input_per_mtok` / `price_output_per_mtok` (USD per million tokens).
"""

from __future__ import annotations

import dataclasses
import re
from typing import List

import jax
import jax.numpy as jnp

from prd_jax.operators.core import Problems
from prd_jax.operators.registry import build_spec
from prd_jax.operators.runner import run
from prd_jax.sampling import SampleOutput


@dataclasses.dataclass
class RemoteEstimate:
    operator: str
    requests: float
    prompt_tokens: float
    completion_tokens: float
    cost: float


class _RecordingLM:
    """Shapes only: records (name, rows, prompt width, budget) per call."""

    def __init__(self, vocab: int, rating_tokens: int = 1):
        self.vocab, self.calls, self.rating_tokens = vocab, [], rating_tokens

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="model call", live=None):
        r = prompts.shape[0] * scfg.num_samples
        self.calls.append((name, r, prompts.shape[1], scfg.max_new_tokens))
        z = jnp.zeros((r,), jnp.int32)
        return SampleOutput(jnp.zeros((r, scfg.max_new_tokens), jnp.int32), jnp.zeros((r, scfg.max_new_tokens)),
                            z, z.astype(bool))

    def next_logits(self, prompts, lengths, name="model call", live=None):
        self.calls.append((name + ".logits", prompts.shape[0], prompts.shape[1], self.rating_tokens))
        return jnp.zeros((prompts.shape[0], self.vocab))


def remote_estimates(config, tokenizer, backend, context_for) -> List[RemoteEstimate]:
    """One row per operator of an eval config; `context_for(spec)` builds its Context."""
    b, width = config.batch_size, config.max_problem_tokens
    runs = -(-config.num_problems // b) * config.k_samples
    out = []
    row = backend.endpoint_row()
    rating = 16 if backend.api == "chat" and not row.continue_final else 1
    rating = max(rating, backend.rating_max_tokens) if not row.logprobs else rating
    for spec in [build_spec(dict(e)) for e in config.operators]:
        lm = _RecordingLM(tokenizer.vocab_size, rating)
        ctx = context_for(spec)
        problems = Problems(jax.ShapeDtypeStruct((b, width), jnp.int32), jax.ShapeDtypeStruct((b,), jnp.int32),
                            jax.ShapeDtypeStruct((b, 64), jnp.int32), jax.ShapeDtypeStruct((b,), jnp.int32))
        keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), b))
        jax.eval_shape(lambda p, k: run(lm, p, k, spec, ctx), problems, keys)
        req = p_tok = c_tok = 0.0
        for name, rows, plen, budget in lm.calls:
            calls = re.search(r"\[(\d+) calls\]$", name)
            times = int(calls.group(1)) / (rows / b) if calls else 1.0
            req += times * rows
            p_tok += times * rows * plen
            c_tok += times * rows * budget
        req, p_tok, c_tok = req * runs, p_tok * runs, c_tok * runs
        cost = (p_tok * backend.price_input_per_mtok + c_tok * backend.price_output_per_mtok) / 1e6
        out.append(RemoteEstimate(spec.label, req, p_tok, c_tok, cost))
    return out


def remote_table(rows: List[RemoteEstimate], backend) -> str:
    lines = [f"{backend.model} via {backend.base_url} ({backend.api}); upper bounds, nothing sent",
             "| operator | requests | prompt tokens | completion tokens | cost USD |", "|---|---|---|---|---|"]
    lines += [f"| {r.operator} | {r.requests:.0f} | {r.prompt_tokens:.3g} | {r.completion_tokens:.3g} | "
              f"{r.cost:.2f} |" for r in rows]
    total = [sum(getattr(r, f) for r in rows) for f in ("requests", "prompt_tokens", "completion_tokens", "cost")]
    lines.append(f"| total | {total[0]:.0f} | {total[1]:.3g} | {total[2]:.3g} | {total[3]:.2f} |")
    if not (backend.price_input_per_mtok or backend.price_output_per_mtok):
        lines.append("(no prices in the config: set backend.price_input_per_mtok / price_output_per_mtok)")
    return "\n".join(lines)
