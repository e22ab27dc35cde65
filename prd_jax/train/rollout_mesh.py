"""Where RL rollouts sample: `config.rollout` (`RolloutSettings`), the rollout mesh and the reshard.

Generation is most of an RL step, and a decode step on the training layout (`fsdp`) gathers
every layer's parameters again on every token. `config.rollout.mesh` gives sampling a layout
of its own (e.g. `tensor=4`, replicated over `data`); the policy's params are resharded into
it once per RL step (`RolloutLayout.put`: one `jax.device_put` of the whole tree), never
inside the decode loop, and the sampled tokens and log-probabilities come back through the
host (`host.to_host`: grading needs them there) into the training batch.

Placement (`config.rollout.placement`):
- "colocated" (default): the rollout mesh spans the training mesh's devices. With
  `rollout.mesh` "" it *is* the training mesh and nothing is resharded (the code path of a
  run without `config.rollout`).
- "split": the devices are divided. In each process, the first `sample_devices /
  process_count` of its local devices (in `jax.local_devices()` order) sample and the rest
  train; the training mesh (`config.mesh`) is built over the training devices of all
  processes, the rollout mesh over the sampling ones. Each process thus holds devices of
  both meshes and every process runs every program. `sample_devices` 0 means half.

A rollout mesh spec that leaves out `data` fills `data` with the devices left over
(`tensor=4` on 8 devices is data=2, tensor=4).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from prd_jax.config_schema import doc_field, group_from_raw
from prd_jax.host import to_host
from prd_jax.mesh import make_mesh, parse_mesh_shape
from prd_jax.model.weights import param_shardings

PLACEMENTS = ("colocated", "split")


_field = doc_field


@dataclasses.dataclass(frozen=True, kw_only=True)
class RolloutSettings:
    """`config.rollout`: the layout and devices RL rollouts sample on (this module's docstring)."""

    mesh: str = _field("rollout mesh axes, e.g. 'tensor=4' (data fills the rest; \"\" = the training mesh's "
                       "layout)", "")
    placement: str = _field(f"where rollouts sample: one of {PLACEMENTS} (split: a disjoint share of the devices)",
                            "colocated")
    sample_devices: int = _field("split: devices that sample, divided evenly over the processes (0 = half)", 0)

    def __post_init__(self):
        for name, tp in (("mesh", str), ("placement", str), ("sample_devices", int)):
            value = getattr(self, name)
            if not isinstance(value, tp) or isinstance(value, bool):
                raise ValueError(f"config.rollout.{name}={value!r}; must be {tp.__name__}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"config.rollout.placement={self.placement!r}; allowed: {PLACEMENTS}")
        if self.sample_devices < 0:
            raise ValueError(f"config.rollout.sample_devices={self.sample_devices}; must be >= 0 (0 = half)")
        if self.sample_devices and self.placement != "split":
            raise ValueError(f"config.rollout.sample_devices={self.sample_devices} applies to placement='split' "
                             f"(placement={self.placement!r}); set it to 0")
        if self.mesh:
            try:
                parse_mesh_shape(self.mesh)
            except ValueError as e:
                raise ValueError(f"config.rollout.mesh={self.mesh!r}: {e}") from None

    @classmethod
    def from_config(cls, raw) -> "RolloutSettings":
        """From `config.rollout` (a dict, ConfigDict or None); unknown keys raise naming the fields."""
        return group_from_raw(cls, raw, "rollout")


def split_devices(settings: RolloutSettings, devices: Optional[Sequence] = None) -> tuple[list, list]:
    """(sampling devices, training devices) by the split rule: in each process, its first
    `sample_devices / process_count` local devices sample and the rest train. Colocated: (all, all)."""
    devices = list(jax.devices() if devices is None else devices)
    if settings.placement == "colocated":
        return devices, devices
    by_process: dict = {}
    for d in devices:
        by_process.setdefault(d.process_index, []).append(d)
    procs = len(by_process)
    per = len(devices) // procs
    if any(len(v) != per for v in by_process.values()):
        raise ValueError(f"config.rollout.placement='split' needs the same device count in each process; got "
                         f"{ {p: len(v) for p, v in sorted(by_process.items())} }")
    total = settings.sample_devices or len(devices) // 2
    if total % procs or not 0 < total // procs < per:
        raise ValueError(f"config.rollout.sample_devices={settings.sample_devices} (= {total} sampling devices) "
                         f"must be a multiple of the {procs} processes and leave each process at least one "
                         f"sampling and one training device ({per} devices each)")
    k = total // procs
    sample = [d for p in sorted(by_process) for d in by_process[p][:k]]
    train = [d for p in sorted(by_process) for d in by_process[p][k:]]
    return sample, train


def _rollout_shape(spec: str) -> dict:
    """The rollout mesh's axis sizes: `spec`, with `data` filling the rest when `spec` leaves it out."""
    sizes = parse_mesh_shape(spec)
    if "data" not in {p.split("=", 1)[0].strip() for p in spec.split(",")}:
        sizes["data"] = -1
    return sizes


def train_mesh(tc, devices: Optional[Sequence] = None) -> Mesh:
    """The training mesh of `tc` (a `TrainConfig`): `config.mesh` over the training devices."""
    _, train = split_devices(tc.rollout, devices)
    return make_mesh(tc.mesh or None, train)


def rollout_mesh(tc, mesh: Mesh, devices: Optional[Sequence] = None) -> Mesh:
    """The rollout mesh for a run whose training mesh is `mesh`: `mesh` itself when colocated
    with `rollout.mesh` ""; else `rollout.mesh` over the training mesh's devices (colocated)
    or the sampling devices (split). Raises when a split run's `mesh` overlaps the sampling
    devices (it was not built by `train_mesh`)."""
    r = tc.rollout
    if r.placement == "colocated":
        if not r.mesh:
            return mesh
        devs = list(mesh.devices.flat)
    else:
        devs, _ = split_devices(r, devices)
        overlap = {d.id for d in devs} & {d.id for d in mesh.devices.flat}
        if overlap:
            raise ValueError(f"config.rollout.placement='split': the training mesh holds sampling devices {sorted(overlap)}; "
                             "build it with train.rollout_mesh.train_mesh")
    # split without a rollout mesh: the training mesh's fsdp and tensor, data over the sampling devices
    sizes = _rollout_shape(r.mesh) if r.mesh else {**mesh.shape, "data": -1}
    fixed = math.prod(s for s in sizes.values() if s != -1)
    if len(devs) % fixed or (-1 not in sizes.values() and fixed != len(devs)):
        raise ValueError(f"config.rollout.mesh={r.mesh!r} ({sizes}) does not tile the {len(devs)} devices "
                         f"rollouts sample on (placement={r.placement!r})")
    return make_mesh(sizes, devs)


class RolloutLayout:
    """The policy's params in the rollout mesh's layout: `put(params)` reshards the whole tree
    in one `jax.device_put` (nothing when the rollout mesh is the training mesh). Under split
    on several processes, where `jax.device_put` cannot move an array between device sets
    that span processes, the tree goes through the host instead (`host.to_host`, then each
    process places its shards)."""

    def __init__(self, cfg, mesh: Mesh, rollout: Mesh):
        self.mesh, self.rollout = mesh, rollout
        self.same = rollout is mesh
        self.shardings = None if self.same else param_shardings(cfg, rollout)
        self.via_host = (not self.same and jax.process_count() > 1
                         and set(rollout.devices.flat) != set(mesh.devices.flat))

    def _move(self, tree, shardings):
        if not self.via_host:
            return jax.device_put(tree, shardings)
        return jax.tree.map(_place_from_host, to_host(jax.tree.map(_as_data, tree)), tree, shardings)

    def put(self, params):
        if self.same:
            return params
        return self._move(params, self.shardings)

    def replicate(self, x):
        """`x` (a key or small array) replicated on the rollout mesh (as is when it is the training mesh)."""
        return x if self.same else self._move(x, NamedSharding(self.rollout, P()))


def _as_data(x):
    """A typed PRNG key array as its raw uint32 data (the host copy is of the data)."""
    return jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x


def _place_from_host(host, like, sharding):
    """`host` (the global value of `like`) as a global array with `sharding`, each process
    placing only its own shards."""
    out = jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
    if jax.dtypes.issubdtype(like.dtype, jax.dtypes.prng_key):
        out = jax.random.wrap_key_data(out, impl=jax.random.key_impl(like))
    return out
