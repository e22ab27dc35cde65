"""Device mesh, logical-axis rules and shardings (docs/design.md principle 5).

Parameters and activations carry logical axis names; `LOGICAL_RULES` maps each name
onto mesh axes `(data, fsdp, tensor)`. A dimension whose size is not divisible by its
mesh axes is left replicated on that dimension (e.g. SmolLM2's 9 heads on tensor=2),
so the same model runs on any mesh shape.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Mapping, Optional, Sequence, Union

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")

# logical name -> mesh axes (a tuple shards one dimension over several mesh axes).
LOGICAL_RULES: dict[str, tuple[str, ...]] = {
    "batch": ("data", "fsdp"),
    "length": (),
    "cache_length": (),
    "embed": ("fsdp",),
    "mlp": ("tensor",),
    "heads": ("tensor",),
    "kv_heads": ("tensor",),
    "head_dim": (),
    "vocab": ("tensor",),
    "layers": (),
    "norm": (),
    # Mixture-of-experts expert axis (expert parallelism, MaxText's `expert` name). It takes
    # `fsdp`; an expert weight's `embed` dimension then stays whole (a mesh axis is used once).
    "expert": ("fsdp",),
}

MeshShape = Union[str, Mapping[str, int], Sequence[int], None]


def parse_mesh_shape(shape: MeshShape) -> dict[str, int]:
    """Normalise "data=2,fsdp=2,tensor=2", a dict, or a 3-sequence to {axis: size}.

    Missing axes default to 1, except that `None` / "" means all devices on `data`.
    """
    if shape is None or shape == "":
        return {"data": -1, "fsdp": 1, "tensor": 1}
    if isinstance(shape, str):
        out = {}
        for part in shape.split(","):
            if "=" not in part:
                raise ValueError(f"mesh spec {shape!r}: expected 'axis=size,...' with axes {MESH_AXES}")
            key, value = (s.strip() for s in part.split("=", 1))
            try:
                out[key] = int(value)
            except ValueError:
                raise ValueError(f"mesh spec {shape!r}: size {value!r} of axis {key!r} is not an integer")
        shape = out
    if not isinstance(shape, Mapping):
        shape = tuple(shape)
        if len(shape) != len(MESH_AXES):
            raise ValueError(f"mesh shape {shape}: expected {len(MESH_AXES)} sizes for {MESH_AXES}")
        shape = dict(zip(MESH_AXES, shape))
    unknown = set(shape) - set(MESH_AXES)
    if unknown:
        raise ValueError(f"mesh axes {sorted(unknown)} unknown; allowed: {MESH_AXES}")
    return {axis: int(shape.get(axis, 1)) for axis in MESH_AXES}


def make_mesh(shape: MeshShape = None, devices: Optional[Sequence[jax.Device]] = None) -> Mesh:
    """A `Mesh` over (data, fsdp, tensor); at most one size may be -1 ("fill")."""
    sizes = parse_mesh_shape(shape)
    devices = list(jax.devices() if devices is None else devices)
    fills = [a for a, s in sizes.items() if s == -1]
    if len(fills) > 1:
        raise ValueError(f"mesh shape {sizes}: at most one axis may be -1")
    if any(s == 0 or s < -1 for s in sizes.values()):
        raise ValueError(f"mesh shape {sizes}: sizes must be positive or -1")
    fixed = math.prod(s for s in sizes.values() if s != -1)
    if fills:
        if len(devices) % fixed:
            raise ValueError(f"mesh shape {sizes}: {len(devices)} devices not divisible by {fixed}")
        sizes[fills[0]] = len(devices) // fixed
    total = math.prod(sizes.values())
    if total > len(devices):
        raise ValueError(f"mesh shape {sizes} needs {total} devices; {len(devices)} available")
    grid = np.array(devices[:total]).reshape([sizes[a] for a in MESH_AXES])
    return Mesh(grid, MESH_AXES)


def logical_to_spec(names: Sequence[Optional[str]], mesh: Mesh,
                    shape: Optional[Sequence[int]] = None,
                    rules: Mapping[str, tuple[str, ...]] = LOGICAL_RULES) -> P:
    """PartitionSpec for an array whose dimensions carry logical `names`.

    Mesh axes of size 1 are dropped; each mesh axis is used at most once; with `shape`,
    a dimension not divisible by its mesh axes is replicated instead.
    """
    used: set[str] = set()
    spec = []
    for dim, name in enumerate(names):
        if name is None:
            spec.append(None)
            continue
        if name not in rules:
            raise ValueError(f"logical axis {name!r} has no rule; known: {sorted(rules)}")
        axes = tuple(a for a in rules[name] if mesh.shape[a] > 1 and a not in used)
        if shape is not None and axes and shape[dim] % math.prod(mesh.shape[a] for a in axes):
            logging.debug("logical axis %s (size %d) not divisible by %s; replicated",
                          name, shape[dim], axes)
            axes = ()
        used.update(axes)
        spec.append(axes if len(axes) > 1 else (axes[0] if axes else None))
    return P(*spec)


def named_sharding(names: Sequence[Optional[str]], mesh: Mesh,
                   shape: Optional[Sequence[int]] = None) -> NamedSharding:
    return NamedSharding(mesh, logical_to_spec(names, mesh, shape))


def tree_shardings(logical_axes, shapes, mesh: Mesh):
    """NamedShardings for a pytree, given matching pytrees of logical names and shapes."""
    return jax.tree.map(lambda names, shape: named_sharding(names, mesh, shape),
                        logical_axes, shapes, is_leaf=lambda x: isinstance(x, tuple))


def batch_size_multiple(mesh: Mesh) -> int:
    """Batch sizes must be a multiple of this (the product of the batch mesh axes)."""
    return math.prod(mesh.shape[a] for a in LOGICAL_RULES["batch"])


DISTRIBUTED_ENV = ("PRD_COORDINATOR", "PRD_NUM_PROCESSES", "PRD_PROCESS_ID")


def init_distributed(coordinator: Optional[str] = None, num_processes: Optional[int] = None,
                     process_id: Optional[int] = None, cpu_collectives: str = "gloo") -> str:
    """Start `jax.distributed` as the environment says; returns how ("explicit", "slurm",
    "tpu_pod", "single" or "already").

    - explicit: arguments, else `PRD_COORDINATOR` (host:port), `PRD_NUM_PROCESSES`,
      `PRD_PROCESS_ID` (local.sh and tests use these);
    - SLURM (`SLURM_NTASKS` > 1) and TPU pods (`TPU_WORKER_HOSTNAMES` with several hosts,
      or `MEGASCALE_COORDINATOR_ADDRESS`): `jax.distributed.initialize()` reads the cluster
      from the environment;
    - otherwise a single process: nothing to do.
    On CPU, cross-process collectives use `cpu_collectives` (gloo).
    """
    coordinator = coordinator or os.environ.get("PRD_COORDINATOR")
    if num_processes is None and os.environ.get("PRD_NUM_PROCESSES"):
        num_processes = int(os.environ["PRD_NUM_PROCESSES"])
    if process_id is None and os.environ.get("PRD_PROCESS_ID"):
        process_id = int(os.environ["PRD_PROCESS_ID"])
    slurm = int(os.environ.get("SLURM_NTASKS", "1")) > 1
    tpu_pod = len(os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",")) > 1 or \
        bool(os.environ.get("MEGASCALE_COORDINATOR_ADDRESS"))
    if coordinator:
        if num_processes is None or process_id is None:
            raise ValueError(f"coordinator {coordinator!r} given without PRD_NUM_PROCESSES/PRD_PROCESS_ID "
                             "(num_processes and process_id are both required)")
        how = "explicit"
    elif slurm or tpu_pod:
        how = "slurm" if slurm else "tpu_pod"
    else:
        return "single"
    if jax.distributed.is_initialized():
        return "already"
    if cpu_collectives:
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    if how == "explicit":
        jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes,
                                   process_id=process_id)
    else:
        jax.distributed.initialize()
    return how
