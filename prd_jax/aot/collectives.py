"""Collectives of a compiled program, read from its optimised HLO text, and the two programs
the rollout layout changes (`train.rollout_mesh`): one decode step and the params' reshard.

`collectives(text)` lists each collective op (all-gather, all-reduce, reduce-scatter,
all-to-all, collective-permute; an async pair counted once, at its `-done`) with the bytes of
its result per device. A decode step on an `fsdp` layout all-gathers each layer's weight
shards; on a rollout layout whose weights are whole or split over `tensor` it gathers none.
"""

from __future__ import annotations

import dataclasses
import re
from typing import List

import jax
import numpy as np

from prd_jax.aot.decode_step import abstract_params
from prd_jax.aot.hlo_cost import DTYPE_BYTES, KINDS
from prd_jax.model.config import ModelConfig
from prd_jax.model.weights import param_shardings

_OP = re.compile(r"=\s*(\(.*?\)|[a-z0-9]+\[[0-9,]*\](?:\{[^}]*\})?)\s+(" + "|".join(KINDS) + r")(-done)?\(")
_ARRAY = re.compile(r"([a-z0-9]+)\[([0-9,]*)\]")


@dataclasses.dataclass(frozen=True)
class Collective:
    kind: str
    shapes: tuple  # result array shapes (per device)
    bytes: int


def collectives(hlo_text: str) -> List[Collective]:
    """Every collective op in optimised HLO text, with its per-device result bytes."""
    out = []
    for line in hlo_text.splitlines():
        if "-start(" in line and not any(f"{k}(" in line for k in KINDS):
            continue  # the start of an async pair: counted at its -done
        m = _OP.search(line)
        if not m:
            continue
        arrays = [(dt, tuple(int(d) for d in dims.split(",") if d)) for dt, dims in _ARRAY.findall(m.group(1))]
        if m.group(3):  # -done of a start: the result is the last array of the start's tuple
            arrays = arrays[-1:]
        out.append(Collective(m.group(2), tuple(s for _, s in arrays),
                              sum(DTYPE_BYTES.get(dt, 4) * int(np.prod(s)) for dt, s in arrays)))
    return out


def total_bytes(ops: List[Collective], kind: str = "") -> int:
    return sum(c.bytes for c in ops if not kind or c.kind == kind)


def reshard_lowered(cfg: ModelConfig, mesh, rollout):
    """The params' reshard from `mesh`'s layout to `rollout`'s (same devices) as one program."""
    return jax.jit(lambda p: p, out_shardings=param_shardings(cfg, rollout)).lower(abstract_params(cfg, mesh))
