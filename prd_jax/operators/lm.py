"""The model as operators see it: a pytree with pure, jittable call methods.

`ModelLM` wraps our decoder and sampler; it implements the declared LM seam
(`operators.lm_protocol.LanguageModel`), its host-side methods no-ops. Tests substitute a
scripted fake with the two call methods (`OperatorLM`), so budgets can be checked against
hand-computed token counts.
"""

from __future__ import annotations

from typing import Any, Optional

import flax
import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from prd_jax import sampling
from prd_jax.model.config import ModelConfig
from prd_jax.operators.lm_protocol import NO_STATS, BatchStats


@flax.struct.dataclass
class ModelLM:
    """Params (a pytree leaf set) plus static config; usable inside `jax.jit`."""

    params: Any
    cfg: ModelConfig = flax.struct.field(pytree_node=False)
    pad_id: int = flax.struct.field(pytree_node=False, default=0)
    mesh: Optional[Mesh] = flax.struct.field(pytree_node=False, default=None)
    # next_logits row chunks (0 = all); generate calls take theirs from the call's SamplingConfig
    max_rows: int = flax.struct.field(pytree_node=False, default=0)

    def generate(self, prompts, lengths, keys, scfg: sampling.SamplingConfig,
                 fanout: bool = True, name: str = "model call", live=None) -> sampling.SampleOutput:
        """Left-padded prompts `[B, P]` -> `[B*M, max_new]` samples (prefill-once fan-out).

        Refused at trace time, before any compute, when the prompt width plus
        `max_new_tokens` exceeds the model context (`check_context`). `live [B]` (rows that
        are real calls) matters to remote LMs only: in-graph every row is computed."""
        check_context(self.cfg, name, prompts.shape[1], scfg.max_new_tokens)
        return sampling.generate(self.cfg, self.params, prompts, lengths, keys,
                                 jnp.int32(scfg.max_new_tokens), scfg, gen_len=scfg.max_new_tokens,
                                 pad_id=self.pad_id, fanout=fanout, mesh=self.mesh)

    def next_logits(self, prompts, lengths, name: str = "model call", live=None) -> jax.Array:
        """fp32 next-token logits `[B, V]` after left-padded prompts `[B, P]`, in chunks of at
        most `max_rows` rows (the forced-rating read of V1 judges runs over every judge row)."""
        check_context(self.cfg, name, prompts.shape[1], 0)
        return sampling.next_logits(self.cfg, self.params, prompts, lengths, max_rows=self.max_rows, mesh=self.mesh)

    # The host side of the seam (`LanguageModel`): the in-graph decoder honours every spec and
    # sampling field, keeps no per-batch counts and holds nothing open.

    def check(self, specs, run_sampling: sampling.Sampling) -> None:
        """Nothing to refuse: every spec and sampling field is the in-graph decoder's own
        (a call past the context is refused at trace time, `check_context`)."""

    def begin(self, problems: int) -> None:
        """No per-batch state in-graph."""

    def stats(self) -> BatchStats:
        """No per-row fields or counters in-graph (`NO_STATS`)."""
        return NO_STATS

    def close(self) -> None:
        """Nothing held open."""

    def served(self, local: str) -> str:
        """These are `local`'s weights (the checkpoint or `config.model`)."""
        return local

    def via(self) -> str:
        return ""


def check_context(cfg: ModelConfig, name: str, prompt_width: int, max_new_tokens: int) -> None:
    """Raise when a call's padded prompt width plus its generation budget can pass the model
    context (`cfg.max_position`): past it the model would run outside its RoPE range."""
    need = int(prompt_width) + int(max_new_tokens)
    if need > cfg.max_position:
        raise ValueError(
            f"{name}: prompt width {prompt_width} + max_new_tokens {max_new_tokens} = {need} tokens exceeds "
            f"the model context of {cfg.max_position}; lower the call's max_new_tokens (or kappa), "
            f"candidate_max_tokens, the workspace size k, or the problem width (max_prompt_tokens)")
