"""`prd-jax train`: build the stage a config names and run the shared loop.

`config.stage` is "sft" or "rl" (RL variants are `config.rl.*`). See `trainer.fit`.
"""

from __future__ import annotations

from prd_jax.mesh import init_distributed
from prd_jax.train import setup
from prd_jax.train.rl import RLStage
from prd_jax.train.sft import SFTStage
from prd_jax.train.trainer import fit

STAGES = ("sft", "rl")


def train(config, workdir: str, *, progress: bool = True) -> dict:
    """Train per `config` in `workdir` (resuming if it holds checkpoints); returns last metrics."""
    if config.stage not in STAGES:
        raise ValueError(f"config.stage={config.stage!r}; allowed: {STAGES}")
    init_distributed()
    mesh = setup.build_mesh(config)
    cfg, params, tokenizer = setup.build_model(config, mesh)
    if config.stage == "sft":
        stage = SFTStage(config, cfg, tokenizer, mesh)
    else:
        stage = RLStage(config, cfg, tokenizer, mesh)
    return fit(config, workdir, stage, mesh=mesh, cfg=cfg, init_params=params, progress=progress)
