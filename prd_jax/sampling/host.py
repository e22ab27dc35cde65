"""Host edge of the sampler: pads ragged prompts into (batch, prompt, generation) buckets,
compiles each bucket once with `.lower().compile()` (logging every compilation), runs
`generate` and trims the outputs.

With `prompt_groups`, `Sampler` sorts a one-device call's prompts by length and cuts them
into that many equal groups, each prefilled and attended over its own prompt width (a compile
key: the widths come from the length buckets); outputs return in the caller's order.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from prd_jax.mesh import batch_size_multiple
from prd_jax.model.config import ModelConfig
from prd_jax.sampling.buckets import bucket, length_bucket, prompt_groups_apply, prompt_widths
from prd_jax.sampling.decode_loop import generate
from prd_jax.sampling.settings import SampleOutput, SamplingConfig

log = logging.getLogger(__name__)
Array = jax.Array


class Sampler:
    """Host edge of the sampler: bucketing, compile cache with logging, trimming.

    >>> sampler = Sampler(cfg, mesh)
    >>> out = sampler(params, [[1, 2, 3], [4, 5]], jax.random.key(0), SamplingConfig(32))
    """

    def __init__(self, cfg: ModelConfig, mesh: Optional[Mesh] = None, pad_id: int = 0,
                 min_bucket: int = 16, prompt_buckets: Sequence[int] = ()):
        """`prompt_buckets`: fixed prompt widths (ascending); a call's prompts are padded to the
        smallest that holds the longest, so a server meets only those shapes. Prompts longer
        than the last fall back to the `length_bucket` ladder. Empty: the ladder alone."""
        buckets = tuple(int(b) for b in prompt_buckets)
        if any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
            raise ValueError(f"prompt_buckets={buckets}: must be strictly ascending positive widths")
        self.cfg, self.mesh, self.pad_id, self.min_bucket = cfg, mesh, pad_id, min_bucket
        self.prompt_buckets = buckets
        self._compiled: dict = {}

    def prompt_width(self, longest: int, max_new_tokens: int) -> int:
        """The padded prompt width of a call whose longest prompt has `longest` tokens."""
        fixed = [b for b in self.prompt_buckets if b >= longest]
        width = fixed[0] if fixed else length_bucket(longest, self.min_bucket)
        return max(longest, min(width, self.cfg.max_position - max_new_tokens))

    @property
    def num_compilations(self) -> int:
        return len(self._compiled)

    def _executable(self, params, batch: int, plen: int, gen_len: int, scfg: SamplingConfig,
                    fanout: bool, widths: tuple = ()):
        key = (batch, plen, gen_len, scfg, fanout, widths)
        if key not in self._compiled:
            log.info("sampler: compiling batch=%d prompt=%d gen=%d %s fanout=%s widths=%s (compilation #%d)",
                     batch, plen, gen_len, scfg, fanout, widths, len(self._compiled) + 1)
            fn = jax.jit(generate, static_argnames=("cfg", "scfg", "gen_len", "pad_id", "fanout", "mesh", "widths"),
                         static_argnums=(0,))
            args = (jax.ShapeDtypeStruct((batch, plen), jnp.int32, sharding=self._batch_sharding(2)),
                    jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=self._batch_sharding(1)),
                    jax.ShapeDtypeStruct((batch,), jax.random.key(0).dtype, sharding=self._batch_sharding(1)),
                    jax.ShapeDtypeStruct((), jnp.int32))
            self._compiled[key] = fn.lower(self.cfg, params, *args, scfg=scfg, gen_len=gen_len,
                                           pad_id=self.pad_id, fanout=fanout, mesh=self.mesh,
                                           widths=widths).compile()
        return self._compiled[key]

    def _batch_sharding(self, ndim: int):
        if self.mesh is None:
            return None
        return NamedSharding(self.mesh, P(*((("data", "fsdp"),) + (None,) * (ndim - 1))))

    def __call__(self, params, prompts: Sequence[Sequence[int]], rng: Array, scfg: SamplingConfig,
                 *, fanout: bool = True) -> SampleOutput:
        """Sample for a ragged list of token-id prompts; returns rows trimmed to the longest.

        `rng` is one key (split per prompt) or an array of one key per prompt.
        """
        prompts = [list(map(int, p)) for p in prompts]
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
        longest = max(len(p) for p in prompts)
        if longest + scfg.max_new_tokens > self.cfg.max_position:
            raise ValueError(f"prompt of {longest} tokens + max_new_tokens={scfg.max_new_tokens} "
                             f"exceeds the model context of {self.cfg.max_position} tokens")
        n = len(prompts)
        keys = rng if (hasattr(rng, "shape") and rng.shape == (n,)) else jax.random.split(rng, n)
        multiple = 1 if self.mesh is None else batch_size_multiple(self.mesh)
        batch = -(-bucket(n, 1) // multiple) * multiple
        plen = self.prompt_width(longest, scfg.max_new_tokens)
        gen_len = length_bucket(scfg.max_new_tokens, self.min_bucket)
        tokens = np.full((batch, plen), self.pad_id, np.int32)
        lengths = np.ones((batch,), np.int32)
        for i, p in enumerate(prompts):  # left padding: the prompt ends at slot plen - 1
            tokens[i, plen - len(p):] = p
            lengths[i] = len(p)
        keys = jnp.concatenate([keys, jax.random.split(jax.random.key(0), batch - n)]) if batch > n else keys
        widths, order = (), None
        if self.mesh is None and prompt_groups_apply(batch, scfg):
            order = np.argsort(lengths, kind="stable")  # shortest first; each prompt keeps its key
            tokens, lengths, keys = tokens[order], lengths[order], keys[jnp.asarray(order)]
            widths = prompt_widths(lengths, plen, scfg.prompt_groups, self.min_bucket)
        exe = self._executable(params, batch, plen, gen_len, scfg, fanout, widths)
        put = (lambda x, nd: jax.device_put(x, self._batch_sharding(nd))) if self.mesh else (lambda x, nd: x)
        out = exe(params, put(jnp.asarray(tokens), 2), put(jnp.asarray(lengths), 1), put(keys, 1),
                  jnp.int32(scfg.max_new_tokens))
        # Trimmed on the host: slicing device arrays to a data-dependent width would compile
        # one small program per width.
        rows = n * scfg.num_samples
        host = jax.device_get(out)
        if order is not None:  # back to the callers' prompt order (rows prompt-major: b * M + m)
            back = np.argsort(order)
            row_back = (back[:, None] * scfg.num_samples + np.arange(scfg.num_samples)).reshape(-1)
            host = jax.tree.map(lambda x: x[row_back], host)
        width = max(1, int(host.lengths[:rows].max()))
        return SampleOutput(jnp.asarray(host.tokens[:rows, :width]), jnp.asarray(host.logprobs[:rows, :width]),
                            jnp.asarray(host.lengths[:rows]), jnp.asarray(host.stopped[:rows]))
