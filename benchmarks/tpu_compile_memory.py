"""Host memory and time of XLA:TPU's compile of the GPT-OSS experts' backward: the gate/up
split on the weights (ours, `prd_jax.model.moe.experts_grouped`) against strided slices of
the activations (`h[..., 0::2]`, the earlier code, kept here as the reference).

    python benchmarks/tpu_compile_memory.py [--rows 8192 ...] [--topology v5p:2x2x1]
                                            [--cap-gb 12]

Each variant compiles, in its own process, the gradient (input and params) of one grouped
expert dispatch for one TPU chip of `--topology` (AOT: libtpu, no TPU needed): `--rows`
routed rows (tokens x top-4), GPT-OSS-20B's width 2880 and one tensor shard of its experts (4 experts, 1440
gate/up columns, as `configs/rl/gptoss20b_pairrl.py:v5p-64` lays them out). The parent polls
the child's resident memory every 0.2 s and stops it past `--cap-gb` (then the figure is a
lower bound). Prints per size both variants' compile seconds and peak RSS and the ratios
strided / split, then one JSON line. The strided backward is a pad with interior padding,
which XLA:TPU emits transfer by transfer, so its cost grows with the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

EXPERTS, WIDTH, GATE_UP, TOP_K = 4, 2880, 1440, 4


def _child(variant: str, rows: int, topology: str) -> None:
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from prd_jax.model import moe

    def strided(x, chosen, weights, p, limit, alpha):  # the earlier code, as the reference
        n, d = x.shape
        flat = chosen.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        rows = jnp.take(x, order // chosen.shape[1], axis=0)
        sizes = jnp.bincount(flat, length=p["gate_up"].shape[0]).astype(jnp.int32)
        h = jax.lax.ragged_dot(rows, p["gate_up"].astype(x.dtype), sizes, preferred_element_type=jnp.float32)
        h = h + jnp.take(p["gate_up_bias"], flat[order], axis=0).astype(jnp.float32)
        gate, up = jnp.minimum(h[..., 0::2], limit), jnp.clip(h[..., 1::2], -limit, limit)
        act = ((up + 1) * gate * jax.nn.sigmoid(gate * alpha)).astype(x.dtype)
        y = jax.lax.ragged_dot(act, p["down"].astype(x.dtype), sizes, preferred_element_type=jnp.float32)
        y = y + jnp.take(p["down_bias"], flat[order], axis=0).astype(jnp.float32)
        back = jnp.zeros_like(y).at[order].set(y, unique_indices=True).reshape(n, chosen.shape[1], d)
        return jnp.einsum("nkd,nk->nd", back, weights)

    run = moe.experts_grouped if variant == "split" else strided

    def loss(x, chosen, weights, p):
        return jnp.sum(run(x, chosen, weights, p, 7.0, 1.702).astype(jnp.float32))

    device = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices[0]
    sh = NamedSharding(Mesh([device], ("x",)), PartitionSpec())
    s = lambda shape, dt: jax.ShapeDtypeStruct(shape, dt, sharding=sh)
    n = rows // TOP_K
    bf = jnp.bfloat16
    params = {"gate_up": s((EXPERTS, WIDTH, GATE_UP), bf), "gate_up_bias": s((EXPERTS, GATE_UP), bf),
              "down": s((EXPERTS, GATE_UP // 2, WIDTH), bf), "down_bias": s((EXPERTS, WIDTH), bf)}
    args = (s((n, WIDTH), bf), s((n, TOP_K), jnp.int32), s((n, TOP_K), jnp.float32), params)
    t = time.perf_counter()
    jax.jit(jax.grad(loss, argnums=(0, 3))).lower(*args).compile()
    print(json.dumps({"compile_s": round(time.perf_counter() - t, 1)}), flush=True)


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


def measure(variant: str, rows: int, topology: str, cap_gb: float) -> dict:
    """Compile seconds and peak RSS (GB) of one variant in a child process, capped at `cap_gb`."""
    cmd = [sys.executable, __file__, "--child", variant, "--rows", str(rows), "--topology", topology]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    peak, capped, t = 0, False, time.perf_counter()
    while proc.poll() is None:
        peak = max(peak, _rss_kb(proc.pid))
        if peak > cap_gb * 1e6:
            proc.kill()
            capped = True
        time.sleep(0.2)
    wall = time.perf_counter() - t
    lines = [line for line in proc.stdout.read().splitlines() if line.startswith("{")]
    if not capped and (proc.returncode != 0 or not lines):
        raise RuntimeError(f"{variant} at {rows} rows: child exited {proc.returncode} (needs libtpu: "
                           f"pip install -e '.[tpu-aot]')")
    return {"compile_s": None if capped else json.loads(lines[-1])["compile_s"], "wall_s": round(wall, 1),
            "peak_rss_gb": round(peak / 1e6, 2), "capped": capped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[8192], help="routed rows (tokens x top-k)")
    ap.add_argument("--topology", default="v5p:2x2x1")
    ap.add_argument("--cap-gb", type=float, default=12.0, help="stop a compile past this resident memory")
    ap.add_argument("--child", choices=("split", "strided"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return _child(a.child, a.rows[0], a.topology)
    out = []
    for n in a.rows:
        split, strided = (measure(v, n, a.topology, a.cap_gb) for v in ("split", "strided"))
        ratio_mem = round(strided["peak_rss_gb"] / split["peak_rss_gb"], 2)
        ratio_wall = round(strided["wall_s"] / split["wall_s"], 2)
        bound = ">=" if strided["capped"] else ""
        print(f"{n} rows: split {split['wall_s']} s, {split['peak_rss_gb']} GB; strided {strided['wall_s']} s, "
              f"{strided['peak_rss_gb']} GB{' (stopped at the cap)' if strided['capped'] else ''}; "
              f"strided / split: memory {bound}{ratio_mem}, wall {bound}{ratio_wall}", flush=True)
        out.append({"rows": n, "split": split, "strided": strided, "ratio_memory": ratio_mem,
                     "ratio_wall": ratio_wall, "lower_bound": strided["capped"]})
    print(json.dumps({"topology": a.topology, "cap_gb": a.cap_gb, "rows": out}))


if __name__ == "__main__":
    main()
