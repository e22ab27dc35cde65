"""`prd-jax compile`: AOT-compile every program of a config for its target and check the fit.

Per program: XLA's per-device arguments, temporaries and outputs (`memory_analysis`; the
donated train state is counted once), their total against the chip's HBM, the analytic
per-device memory (`aot.estimate`: params or train state + KV cache) beside it, analytic
FLOPs and a roofline time. The exit status is non-zero when any program does not fit.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import List, Optional

import jax
from jax.experimental import topologies

from prd_jax.aot import programs as PG
from prd_jax.aot.chips import Target, parse_target
from prd_jax.data.synthetic import CharVocab
from prd_jax.eval_config import EvalConfig
from prd_jax.mesh import make_mesh
from prd_jax.model.attention import compiling_for
from prd_jax.train.config import TrainConfig
from prd_jax.train.rollout_mesh import split_devices, train_mesh
from prd_jax.train.setup import model_tokenizer

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Row:
    name: str
    arguments: float
    temporaries: float
    outputs: float
    aliased: float
    hbm_bytes: float
    analytic_bytes: Optional[float]
    flops: float
    est_seconds: float
    compile_seconds: float
    detail: str
    knob: str

    @property
    def bytes_per_device(self) -> float:
        return self.arguments + self.temporaries + self.outputs - self.aliased

    @property
    def fits(self) -> bool:
        return self.bytes_per_device <= self.hbm_bytes


def typed(config):
    """The validated settings of a training config (`TrainConfig`, with `stage`) or an eval config (`EvalConfig`)."""
    return TrainConfig.from_config(config) if "stage" in config else EvalConfig.from_config(config)


def target_of(config, override: Optional[str], devices: Optional[int]) -> Target:
    """`--topology` / `--devices`, else the config's declared `target` (e.g. "v5p:4x4x4")."""
    if override:
        return _with_devices(parse_target(override), devices)
    declared = typed(config).target
    if not declared:
        raise ValueError("the config declares no `target` (e.g. c.target = 'v5p:4x4x4'); pass --topology "
                         "CHIP:TOPOLOGY (TPU) or --topology GPU:COUNT (e.g. h200:8)")
    return _with_devices(parse_target(declared), devices)


def _with_devices(t: Target, devices: Optional[int]) -> Target:
    if not devices:
        return t
    if t.chip.platform != "gpu":
        raise ValueError(f"--devices={devices} applies to GPU targets; {t.label} is a TPU topology")
    return dataclasses.replace(t, devices=devices)


def target_devices(target: Target) -> list:
    """TPU: the topology's devices from libtpu (no TPU needed); GPU: the simulated CPU devices."""
    if target.chip.platform == "tpu":
        # AOT only: no TPU is opened, so another process (a run, a second compile) may hold libtpu.
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        try:
            return list(topologies.get_topology_desc(platform="tpu", topology_name=target.topology).devices)
        except Exception as e:  # libtpu missing or topology unknown
            raise RuntimeError(f"cannot get TPU topology {target.topology!r} ({e}); TPU AOT needs libtpu: "
                               f"pip install -e '.[tpu-aot]'") from e
    devs = jax.devices("cpu")
    if len(devs) < target.devices:
        raise RuntimeError(f"{target.label} needs {target.devices} simulated devices; this process has {len(devs)} "
                           f"(set XLA_FLAGS=--xla_force_host_platform_device_count={target.devices} before jax starts; "
                           f"`prd-jax compile` does this for --topology GPU:N)")
    return devs[:target.devices]


def tokenizer_for(config):
    """The config's tokenizer when it is on disk; else SmolLM2's ChatML tokenizer as a stand-in.

    Only template piece lengths depend on it (problems and candidates are padded to their
    configured widths), so a stand-in moves prompt widths by the template length difference.
    The stand-in encodes `</think>` as a multi-token marker, so configs with thinking budgets
    compile (`runner.thinking_marker`)."""
    settings = typed(config)
    if isinstance(settings, TrainConfig) and settings.tokenizer == "char":
        return CharVocab(), "char"
    name, path = ((settings.model.name, settings.model.path) if isinstance(settings, TrainConfig)
                  else (settings.model, settings.model_path))
    if name == "smollm2-135m" or (path and os.path.exists(path)):
        return model_tokenizer(name, path or None), name
    tok = model_tokenizer("smollm2-135m", None)
    tok.stand_in_thinking = True
    return tok, "smollm2-135m (stand-in: the model's tokenizer is not on disk)"


def build(config, target: Target, whole_operators: bool = False):
    """(mesh, programs, tokenizer label) for `config` on `target`."""
    settings, devices = typed(config), target_devices(target)
    declared_mesh, train_devices = settings.mesh, target.devices
    if isinstance(settings, TrainConfig):  # `rollout.placement="split"` trains on the devices that do not sample
        train_devices = len(split_devices(settings.rollout, devices)[1])
        mesh = train_mesh(settings, devices)
    else:
        mesh = make_mesh(declared_mesh or None, devices)
    if mesh.devices.size != train_devices:
        raise ValueError(f"config.mesh={declared_mesh!r} uses {mesh.devices.size} devices; the target "
                         f"{target.label} has {train_devices} for it")
    cfg = PG.model_config(config)
    tok, tok_label = tokenizer_for(config)
    if "operators" in config:
        progs = PG.eval_programs(config, cfg, mesh, tok, target.chip, whole_operators)
    else:
        progs = PG.training_programs(config, cfg, mesh, tok, target.chip, devices)
    return mesh, progs, tok_label


def estimate_table(config, target: Target) -> str:
    """The whole-eval roofline (`programs.eval_estimates`) as a table, with a total line."""
    mesh = make_mesh(typed(config).mesh or None, target_devices(target))
    tok, _ = tokenizer_for(config)
    rows = PG.eval_estimates(config, PG.model_config(config), mesh, tok, target.chip)
    lines = ["| operator | generated tokens (upper bound) | roofline hours |", "|---|---|---|"]
    lines += [f"| {r.operator} | {r.generated_tokens:.3g} | {r.seconds / 3600:.2f} |" for r in rows]
    lines.append(f"| total | {sum(r.generated_tokens for r in rows):.3g} | {sum(r.seconds for r in rows) / 3600:.2f} |")
    return "\n".join(lines)


def compile_all(config, target: Target, only: Optional[List[str]] = None, whole_operators: bool = False) -> List[Row]:
    _, progs, tok_label = build(config, target, whole_operators)
    log.info("tokenizer for template lengths: %s", tok_label)
    rows = []
    for p in progs:
        if only and not any(p.name.startswith(o) for o in only):
            continue
        t0 = time.perf_counter()
        with compiling_for(target.chip.platform):  # the target's decode attention, not the CPU's
            mem = p.lower().compile().memory_analysis()
        rows.append(Row(p.name, mem.argument_size_in_bytes, mem.temp_size_in_bytes, mem.output_size_in_bytes,
                        mem.alias_size_in_bytes, target.chip.hbm_bytes, p.analytic_bytes, p.flops, p.est_seconds,
                        time.perf_counter() - t0, p.detail, p.knob))
        r = rows[-1]  # logged as each program compiles, so a run cut off by a time limit keeps its figures
        log.info("compiled %s in %.1f s: %.2f GB per device (args %.2f, temps %.2f, outputs %.2f) of %.2f HBM",
                 p.name, r.compile_seconds, r.bytes_per_device / 1e9, r.arguments / 1e9, r.temporaries / 1e9,
                 (r.outputs - r.aliased) / 1e9, r.hbm_bytes / 1e9)
    return rows


def table(rows: List[Row]) -> str:
    g = lambda x: "-" if x is None else f"{x / 1e9:.2f}"
    lines = ["| program | args GB | temps GB | outputs GB | total GB/device | analytic GB | HBM GB | fits | "
             "TFLOPs | est. s | shapes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.name} | {g(r.arguments)} | {g(r.temporaries)} | {g(r.outputs - r.aliased)} | "
                     f"{g(r.bytes_per_device)} | {g(r.analytic_bytes)} | {g(r.hbm_bytes)} | "
                     f"{'yes' if r.fits else 'NO'} | {r.flops / 1e12:.1f} | {r.est_seconds:.1f} | {r.detail} |")
    return "\n".join(lines)


def failures(rows: List[Row]) -> List[str]:
    return [f"{r.name} does not fit: {r.bytes_per_device / 1e9:.2f} GB per device > {r.hbm_bytes / 1e9:.2f} GB HBM "
            f"(over by {(r.bytes_per_device - r.hbm_bytes) / 1e9:.2f} GB); lower config.{r.knob}"
            + (" or raise grad_accum_steps" if r.name == "train_step" else "")
            for r in rows if not r.fits]


def as_json(config_name: str, target: Target, rows: List[Row]) -> dict:
    return {"config": config_name, "topology": target.label,
            "programs": [{"name": r.name, "bytes_per_device": int(r.bytes_per_device), "hbm_bytes": int(r.hbm_bytes),
                          "fits": r.fits, "flops": r.flops, "est_seconds": r.est_seconds,
                          "analytic_bytes": None if r.analytic_bytes is None else int(r.analytic_bytes),
                          "arguments": int(r.arguments), "temporaries": int(r.temporaries),
                          "outputs": int(r.outputs), "aliased": int(r.aliased),
                          "compile_seconds": round(r.compile_seconds, 1), "shapes": r.detail} for r in rows],
            "fits": all(r.fits for r in rows)}
