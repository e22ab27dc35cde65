"""Accelerator table for `prd-jax compile`: peak dense bf16 FLOP/s, HBM per chip, HBM bandwidth.

FLOP/s and bandwidth are the vendors' published per-chip numbers (dense, no sparsity). HBM
per device: v5p is the 95.74 GiB that XLA's own out-of-memory error reports for it; the
other TPUs are the vendors' capacities (v4 32 GiB, v5e 16 GiB, v6e 32 GiB; XLA may reserve
a little of it); GPUs are the card's memory (H100 80 GB, H200 141 GB) less 1 GiB for the
CUDA runtime. They feed the "fits" verdict and a roofline time estimate, not a measured
speed.

Interconnect (`ici_bandwidth`, bytes/s per chip, all links together as the vendor states it):
the TPUs' "Interchip Interconnect BW" of Google Cloud's TPU system-architecture pages (v4
2,400 Gbps, v5e 1,600 Gbps, v5p 4,800 Gbps, v6e 3,584 Gbps), the GPUs' NVLink 4 total of
900 GB/s (NVIDIA's H100 SXM and H200 data sheets). A collective over one mesh axis uses only
some links, so time read against it is a floor (`aot.roofline`).
"""

from __future__ import annotations

import dataclasses

GiB = 2 ** 30


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    peak_flops: float  # dense bf16 FLOP/s per chip
    hbm_bytes: float  # usable HBM per device (bytes)
    hbm_bandwidth: float  # bytes/s per chip
    platform: str  # "tpu" or "gpu"
    ici_bandwidth: float = 0.0  # bytes/s per chip over all interconnect links (0: unknown)


CHIPS = {
    "v4": Chip("TPU v4", 275e12, 32 * GiB, 1.2e12, "tpu", 2400e9 / 8),
    "v5e": Chip("TPU v5e", 197e12, 16 * GiB, 0.819e12, "tpu", 1600e9 / 8),
    "v5p": Chip("TPU v5p", 459e12, 95.74 * GiB, 2.765e12, "tpu", 4800e9 / 8),
    "v6e": Chip("TPU v6e", 918e12, 32 * GiB, 1.64e12, "tpu", 3584e9 / 8),
    "h100": Chip("NVIDIA H100 SXM", 989e12, 80e9 - GiB, 3.35e12, "gpu", 900e9),
    "h200": Chip("NVIDIA H200", 989e12, 141e9 - GiB, 4.8e12, "gpu", 900e9),
}


@dataclasses.dataclass(frozen=True)
class Target:
    """Where programs are compiled for: a TPU topology ("v5p:4x4x4") or N GPUs ("h200", N)."""

    chip: Chip
    topology: str = ""  # TPU topology name for libtpu; "" for GPU targets
    devices: int = 0  # number of devices (chips on TPU)

    @property
    def label(self) -> str:
        return self.topology or f"{self.chip.name} x{self.devices}"


def parse_target(spec: str) -> Target:
    """"v5p:4x4x4" / "v5e:2x2" (TPU topologies; chips = product of the dims) or "h200:8" /
    "h100:16" (GPU count; compiled on that many simulated CPU devices)."""
    if ":" not in spec:
        raise ValueError(f"target {spec!r}: expected CHIP:TOPOLOGY (e.g. v5p:4x4x4, v5e:2x2) or GPU:COUNT "
                         f"(e.g. h200:8); chips: {sorted(CHIPS)}")
    chip_name, shape = spec.split(":", 1)
    if chip_name not in CHIPS:
        raise ValueError(f"target {spec!r}: chip {chip_name!r} unknown; allowed: {sorted(CHIPS)}")
    chip = CHIPS[chip_name]
    try:
        dims = [int(d) for d in shape.split("x")]
    except ValueError:
        raise ValueError(f"target {spec!r}: {shape!r} is not a topology like 2x2 or 4x4x4, nor a GPU count")
    if chip.platform == "gpu":
        if len(dims) != 1 or dims[0] < 1:
            raise ValueError(f"target {spec!r}: a GPU target is GPU:COUNT, e.g. h200:8")
        return Target(chip, "", dims[0])
    n = 1
    for d in dims:
        n *= d
    return Target(chip, spec, n)
