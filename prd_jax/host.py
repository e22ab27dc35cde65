"""The host side of a multi-process run (docs/design.md principle 7, `jax.distributed`).

Every process runs the same program over one global mesh; a jitted sampler, operator or
train step returns *global* arrays of which each process holds only its own shards.

- `to_host`: the one way device outputs reach numpy. Every process gets the whole value
  (sharded arrays are all-gathered), so host code (decoding, grading, advantages,
  results) sees the same numbers on every process.
- `is_main` / `on_main`: process 0 alone reads and writes the workdir's small files
  (config.json, metrics.jsonl, settings.json, results.jsonl, summary.md); `on_main(fn)`
  runs `fn` there and hands its JSON value to every process, so no other process needs
  to see those files (no shared filesystem, no read-after-write race).
- `sync`: a named barrier across processes (a no-op in a single process).
"""

from __future__ import annotations

import json
from typing import Any, Callable

import jax
import numpy as np
from jax.experimental import multihost_utils


def is_main() -> bool:
    """Whether this is process 0, the one that writes workdir files."""
    return jax.process_index() == 0


def _leaf_to_host(x):
    if not isinstance(x, jax.Array):
        return x  # numpy arrays, Python scalars and other host values pass through
    if x.is_fully_addressable:  # a single process, or an array on this process's devices only
        return np.asarray(x)
    if x.is_fully_replicated:  # every process holds a full copy
        return np.asarray(x.addressable_data(0))

    # Sharded across processes: a collective, so every process must call `to_host` on the
    # same outputs in the same order (they do: all run the same program).
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def to_host(tree):
    """`tree` with every `jax.Array` leaf replaced by a numpy array of its *global* value.

    Use it for every read of a sampler, operator or train-step output: a bare
    `jax.device_get` fails on an array sharded across processes. Arrays this process holds
    entirely are copied, arrays replicated across processes give the local copy, and arrays
    sharded across processes are all-gathered; host values (numpy, scalars) pass through.
    """
    leaves, treedef = jax.tree.flatten(tree)
    local = [x for x in leaves if isinstance(x, jax.Array) and x.is_fully_addressable]
    for x in local:  # start all device -> host copies before waiting on any
        x.copy_to_host_async()
    return jax.tree.unflatten(treedef, [_leaf_to_host(x) for x in leaves])


def sync(name: str) -> None:
    """Barrier: every process waits here until all have reached `sync(name)`."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


def on_main(fn: Callable[[], Any]) -> Any:
    """`fn()` run on process 0 only; every process returns its JSON-serialisable value.

    If `fn` raises on process 0, it re-raises there and every other process raises a
    RuntimeError naming the error (instead of waiting forever).
    """
    if jax.process_count() == 1:
        return json.loads(json.dumps(fn()))  # the same JSON types as with several processes

    error = None
    if is_main():
        try:
            payload = {"value": fn()}
        except Exception as e:  # handed on, so the other processes stop too
            error, payload = e, {"error": f"{type(e).__name__}: {e}"}
        data = np.frombuffer(json.dumps(payload).encode(), np.uint8)
    else:
        data = np.zeros((0,), np.uint8)
    size = int(multihost_utils.broadcast_one_to_all(np.int64(data.size)))
    if not is_main():
        data = np.zeros((size,), np.uint8)
    payload = json.loads(np.asarray(multihost_utils.broadcast_one_to_all(data)).tobytes())
    if error is not None:
        raise error
    if "error" in payload:
        raise RuntimeError(f"process 0 failed: {payload['error']}")
    return payload["value"]
