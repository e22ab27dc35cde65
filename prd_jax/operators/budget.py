"""Token budgets (PDR paper §2, "B_seq" and "B_total"; DESIGN.md principle 4).

Every model call records, per problem, its input tokens (the whole prompt, workspace
included), its output tokens, and whether it lies on the accepted path. Calls made in
parallel form a group `[B, M]`. B_seq sums (in + out) over accepted calls (latency
proxy); B_total sums over all calls (compute proxy).
"""

from __future__ import annotations

from typing import List

import flax
import jax
import jax.numpy as jnp

Array = jax.Array


@flax.struct.dataclass
class CallGroup:
    """`M` parallel calls per problem: token counts `[B, M]` and the accepted mask."""

    in_tokens: Array
    out_tokens: Array
    accepted: Array
    name: str = flax.struct.field(pytree_node=False, default="call")


@flax.struct.dataclass
class CallLog:
    """All calls of an operator run, flattened to `[B, C]`; `names` has one entry per call."""

    in_tokens: Array
    out_tokens: Array
    accepted: Array
    names: tuple = flax.struct.field(pytree_node=False, default=())

    @property
    def b_seq(self) -> Array:
        return jnp.sum((self.in_tokens + self.out_tokens) * self.accepted, axis=1)

    @property
    def b_total(self) -> Array:
        return jnp.sum(self.in_tokens + self.out_tokens, axis=1)

    @classmethod
    def from_groups(cls, groups: List[CallGroup]) -> "CallLog":
        names = tuple(n for g in groups for n in [g.name] * g.in_tokens.shape[1])
        cat = lambda f: jnp.concatenate([getattr(g, f) for g in groups], axis=1)
        return cls(cat("in_tokens").astype(jnp.int32), cat("out_tokens").astype(jnp.int32),
                   cat("accepted").astype(bool), names)


def one_hot_accepted(index: Array, width: int) -> Array:
    """Accepted mask `[B, width]` with row b's call `index[b]` on the path."""
    return jnp.arange(width)[None, :] == index[:, None]


def group(in_tokens, out_tokens, accepted, name: str) -> CallGroup:
    return CallGroup(jnp.asarray(in_tokens, jnp.int32), jnp.asarray(out_tokens, jnp.int32),
                     jnp.asarray(accepted, bool), name)
