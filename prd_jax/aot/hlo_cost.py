"""Per-device cost of a compiled program: XLA's `cost_analysis()` and the collectives of its HLO.

`Cost.of(compiled)` reads FLOPs and bytes accessed from `compiled.cost_analysis()` and the
bytes each device moves through collectives from the optimised HLO text (`compiled.as_text()`).
All three are per device: the SPMD-partitioned module is one device's program.

XLA's cost analysis counts a `while` body once, whatever its trip count (checked on
XLA:CPU with a 10-step `fori_loop`, `scan` and `while_loop`: each read as one step;
tests/test_aot_estimate.py). So per-step decode figures come from a program that is one
decode step (`aot.decode_step`), and `Cost.loops` says how many `while` loops a program
holds. Collectives are counted with the product of their enclosing loops' known trip
counts (`known_trip_count` in the while's backend config; a loop without one counts once).

Bytes moved per device by one collective over a group of n devices, with operand bytes O
(the ring algorithms' traffic, our choice of model):
- all-gather: (n - 1) x O (it receives every other shard; the result is n x O);
- reduce-scatter: (n - 1) / n x O;
- all-reduce: 2 (n - 1) / n x O (a reduce-scatter then an all-gather);
- all-to-all: (n - 1) / n x O;
- collective-permute: O.
The asynchronous forms (`all-gather-start`, ...) count once, their `-done` halves not at all.
A collective is one channel: XLA:TPU can print one collective in several computations (an
async or collective-matmul fusion's pieces, each with the same `channel_id`); it counts once.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Dict, List, Optional, Tuple

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s4": 0.5, "u4": 0.5, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
               "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([\d,]*)\]")
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+([a-z][\w\-]*)\((.*?)\)(.*)$")
_CALLEES = re.compile(r"\b(?:calls|to_apply|body|condition|branch_computations)=(\{[^}]*\}|%?[\w.\-]+)")


def array_bytes(shape_text: str) -> float:
    """Bytes of every array in an HLO shape (`bf16[2,4]{1,0}` or a tuple of them); `f8*` types are 1 byte."""
    total = 0.0
    for dtype, dims in _ARRAY.findall(shape_text):
        size = 1 if dtype.startswith("f8") else DTYPE_BYTES.get(dtype)
        if size is None:
            continue  # token[], opaque
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += size * n
    return total


def group_size(attrs: str, devices: int) -> int:
    """Devices per replica group of a collective: `{{0,1},{2,3}}`, iota `[G,S]<=[N]`, or the
    mesh form `mesh['a'=4,'b'=2] ... {'a'}` (the product of the named axes); all devices when empty."""
    m = re.search(r"replica_groups=\{(\{[\d,]*\})", attrs)
    if m:
        return max(1, len([d for d in m.group(1).strip("{}").split(",") if d]))
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attrs)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=mesh\[([^\]]*)\].*?\{([^{}]*)\}", attrs)
    if m:
        sizes = dict((k.strip("'"), int(v)) for k, v in re.findall(r"('[^']+'|\w+)=(\d+)", m.group(1)))
        n = 1
        for axis in re.findall(r"'([^']+)'", m.group(2)):
            n *= sizes.get(axis, 1)
        return n
    return devices


def moved_bytes(kind: str, operand_bytes: float, n: int) -> float:
    """Bytes one device sends or receives for one collective (the module docstring's model)."""
    if n <= 1 and kind != "collective-permute":
        return 0.0
    return {"all-gather": (n - 1) * operand_bytes,
            "reduce-scatter": (n - 1) / n * operand_bytes,
            "all-reduce": 2 * (n - 1) / n * operand_bytes,
            "all-to-all": (n - 1) / n * operand_bytes,
            "collective-permute": operand_bytes}[kind]


@dataclasses.dataclass(frozen=True)
class Collective:
    kind: str
    operand_bytes: float
    group: int
    times: int  # trips of the enclosing loops

    @property
    def moved(self) -> float:
        return self.times * moved_bytes(self.kind, self.operand_bytes, self.group)


def _parse(hlo: str) -> Tuple[Dict[str, list], Dict[str, str], Optional[str]]:
    """Computations -> their instructions `(name, shape, op, operands, attrs)`, each
    instruction's shape by name, and the entry computation's name."""
    comps: Dict[str, list] = {}
    shapes: Dict[str, str] = {}
    current, entry = None, None
    for line in hlo.splitlines():
        m = _COMPUTATION.match(line)
        if m:
            current = m.group(1)
            comps[current] = []
            if line.startswith("ENTRY"):
                entry = current
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            name, shape, op, operands, attrs = m.groups()
            shapes[name] = shape
            comps[current].append((name, shape, op, operands, attrs))
    return comps, shapes, entry


def _trip_count(attrs: str) -> int:
    m = re.search(r"backend_config=(\{.*\})\s*$", attrs)
    if m:
        try:
            return int(json.loads(m.group(1)).get("known_trip_count", {}).get("n", 1))
        except (ValueError, AttributeError):
            pass
    m = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', attrs)
    return int(m.group(1)) if m else 1


def collectives(hlo: str, devices: int) -> List[Collective]:
    """Every collective of an optimised HLO module with its operand bytes, group size and the
    trips of its enclosing `while` loops (a module without an ENTRY is read as one computation)."""
    comps, shapes, entry = _parse(hlo)
    if entry is None:  # a fragment: every computation once
        times = {c: 1 for c in comps}
    else:
        times = {entry: 1}
        order = [entry]
        for comp in order:  # callers before callees (HLO has no recursion)
            for _, _, op, _, attrs in comps.get(comp, []):
                trips = _trip_count(attrs) if op == "while" else 1
                for group in _CALLEES.findall(attrs):
                    for callee in (c.strip().lstrip("%") for c in group.strip("{}").split(",")):
                        if callee in comps:
                            times[callee] = times.get(callee, 0) + times[comp] * trips
                            if callee not in order:
                                order.append(callee)
    found: Dict[object, Collective] = {}
    for comp, instructions in comps.items():
        for name, shape, op, operands, attrs in instructions:
            kind = op[:-len("-start")] if op.endswith("-start") else op
            if kind not in KINDS or comp not in times:
                continue
            names = [o.strip().lstrip("%") for o in operands.split(",") if o.strip()]
            inline = array_bytes(operands)  # operands printed with their shapes
            operand_bytes = inline or sum(array_bytes(shapes.get(n, "")) for n in names)
            c = Collective(kind, operand_bytes, group_size(attrs, devices), times[comp])
            channel = re.search(r"channel_id=(\d+)", attrs)
            key = (kind, channel.group(1)) if channel else (comp, name)
            if key not in found or c.moved > found[key].moved:
                found[key] = c
    return list(found.values())


def while_loops(hlo: str) -> int:
    return len(re.findall(r"\swhile\(", hlo))


@dataclasses.dataclass(frozen=True)
class Cost:
    """Per-device FLOPs, bytes accessed (XLA's cost analysis) and collective bytes moved, by kind."""

    flops: float
    bytes_accessed: float
    collective_bytes: Dict[str, float]
    loops: int = 0  # `while` loops in the program (their bodies count once in flops and bytes)

    @property
    def ici_bytes(self) -> float:
        return sum(self.collective_bytes.values())

    @classmethod
    def from_hlo(cls, flops: float, bytes_accessed: float, hlo: str, devices: int) -> "Cost":
        by_kind = {k: 0.0 for k in KINDS}
        for c in collectives(hlo, devices):
            by_kind[c.kind] += c.moved
        return cls(flops, bytes_accessed, by_kind, while_loops(hlo))

    @classmethod
    def of(cls, compiled, devices: int) -> "Cost":
        """From a `jax.stages.Compiled` of an SPMD program over `devices` devices."""
        ca = compiled.cost_analysis()
        ca = (ca[0] if ca else {}) if isinstance(ca, (list, tuple)) else (ca or {})
        return cls.from_hlo(float(ca.get("flops", 0.0)), float(ca.get("bytes accessed", 0.0)), compiled.as_text(),
                            devices)
