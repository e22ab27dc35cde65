"""The model as operators see it: a pytree with pure, jittable call methods.

`ModelLM` wraps our decoder and sampler. Tests substitute a scripted fake with the same
two methods, so budgets can be checked against hand-computed token counts.
"""

from __future__ import annotations

from typing import Any, Optional

import flax
import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from prd_jax import sampling
from prd_jax.model.config import ModelConfig


@flax.struct.dataclass
class ModelLM:
    """Params (a pytree leaf set) plus static config; usable inside `jax.jit`."""

    params: Any
    cfg: ModelConfig = flax.struct.field(pytree_node=False)
    pad_id: int = flax.struct.field(pytree_node=False, default=0)
    mesh: Optional[Mesh] = flax.struct.field(pytree_node=False, default=None)

    def generate(self, prompts, lengths, keys, scfg: sampling.SamplingConfig,
                 fanout: bool = True) -> sampling.SampleOutput:
        """Left-padded prompts `[B, P]` -> `[B*M, max_new]` samples (prefill-once fan-out)."""
        return sampling.generate(self.cfg, self.params, prompts, lengths, keys,
                                 jnp.int32(scfg.max_new_tokens), scfg, gen_len=scfg.max_new_tokens,
                                 pad_id=self.pad_id, fanout=fanout, mesh=self.mesh)

    def next_logits(self, prompts, lengths) -> jax.Array:
        """fp32 next-token logits `[B, V]` after left-padded prompts `[B, P]`."""
        return sampling.prefill(self.cfg, self.params, prompts, lengths, prompts.shape[1],
                                mesh=self.mesh)[0]
