"""The LM seam, declared (DESIGN principle 8: one operator program, many LMs).

Two protocols, one inside the other:

- `OperatorLM`: what an operator program calls, inside `jax.jit`: `generate` (sampled rows
  with their token counts) and `next_logits` (a judge's forced-rating read). Anything with
  these two methods runs every registered operator (the tests' scripted fakes, the AOT
  recorder).
- `LanguageModel`: an `OperatorLM` a harness runs (`prd_jax.evaluate`), with the host side
  of a run: `check` refuses at setup a setting this LM cannot honour (one line naming the
  field and what is allowed), `begin` / `stats` bracket one operator batch, `close` ends
  the run, `served` / `via` say what the rows and the summary name as the model. The
  in-graph decoder (`operators.lm.ModelLM`) and the remote endpoint
  (`backends.remote_lm.RemoteLM`) implement it; the harness holds no branch on which.

Both are `typing.Protocol`s (structural: no base class to inherit) and
`runtime_checkable`, so `isinstance(lm, LanguageModel)` checks that every method is there.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence, runtime_checkable

import jax

from prd_jax.sampling import SampleOutput, Sampling, SamplingConfig

__all__ = ["BatchStats", "LanguageModel", "NO_STATS", "OperatorLM", "forced_thinking"]

# Spec fields that close a thinking block at a token budget inside the decode loop
# (`sampling.force_think_end`): the generation calls' `think_budget` (a judge's too) and
# the PDR summary's `kappa_think`.
FORCED_THINKING = ("think_budget", "kappa_think")


@dataclasses.dataclass(frozen=True)
class BatchStats:
    """What an LM reports after one operator batch (`LanguageModel.stats`).

    `rows`: problem index in the batch -> extra results-row fields (a remote LM's request
    counters, usage and failures; none in-graph); `counts`: counters summed over the batch
    that the progress bar shows (a remote LM's `requests`)."""

    rows: dict = dataclasses.field(default_factory=dict)
    counts: dict = dataclasses.field(default_factory=dict)


NO_STATS = BatchStats()


@runtime_checkable
class OperatorLM(Protocol):
    """The two calls an operator program makes (traced inside `jax.jit`)."""

    def generate(self, prompts: jax.Array, lengths: jax.Array, keys: jax.Array, scfg: SamplingConfig,
                 fanout: bool = True, name: str = "model call", live=None) -> SampleOutput:
        """Left-padded prompts `[B, P]` (`lengths [B]` real tokens) and one PRNG key per row
        -> `scfg.num_samples` rows per prompt, `[B*M, scfg.max_new_tokens]`, problem-major.
        `name` labels the call (errors, request tags); `live` `[B]` or `[B*M]` marks the rows
        that are real calls (the others may come back empty)."""
        ...

    def next_logits(self, prompts: jax.Array, lengths: jax.Array, name: str = "model call",
                    live=None) -> jax.Array:
        """fp32 logits `[B, V]` of the token after each left-padded prompt."""
        ...


@runtime_checkable
class LanguageModel(OperatorLM, Protocol):
    """An `OperatorLM` with the host side of an eval run (see the module docstring)."""

    def check(self, specs: Sequence, run_sampling: Sampling) -> None:
        """Raise ValueError, one line naming the field and what is allowed, when an operator
        spec (`config.operators[i]`, in order) or the run's `run_sampling` asks for what this LM
        cannot do. Called once at setup, before any call."""
        ...

    def begin(self, problems: int) -> None:
        """An operator batch over `problems` problems starts (rows are problem-major)."""
        ...

    def stats(self) -> BatchStats:
        """What the batch since `begin` cost and how its calls went; resets the counts."""
        ...

    def close(self) -> None:
        """The run is over (open connections are released)."""
        ...

    def served(self, local: str) -> str:
        """The model the rows, summary and plot name: `local` (the checkpoint or
        `config.model`) when this LM runs those weights, else what it calls."""
        ...

    def via(self) -> str:
        """Where the calls went, for the summary's title ('' when in-graph)."""
        ...


def forced_thinking(spec, where: str) -> list:
    """(field path, value) of every forced-thinking budget (`FORCED_THINKING`) set in
    `spec`, nested dataclasses (a judge) included, e.g. ("config.operators[1].judge.think_budget", 256)."""
    out = []
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if f.name in FORCED_THINKING and value:
            out.append((f"{where}.{f.name}", value))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += forced_thinking(value, where if f.name == "budget" else f"{where}.{f.name}")  # budget: written flat
    return out
