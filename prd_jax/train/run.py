"""`prd-jax train`: validate the config once (`train.config.TrainConfig`), build the stage it
names and run the shared loop.

`config.stage` is "sft" or "rl" (RL variants are `config.rl.*`). See `trainer.fit`.
"""

from __future__ import annotations

from prd_jax.mesh import init_distributed
from prd_jax.train import setup
from prd_jax.train.config import STAGES, TrainConfig
from prd_jax.train.rl import RLStage
from prd_jax.train.sft import SFTStage
from prd_jax.train.trainer import fit

__all__ = ["STAGES", "train"]


def train(config, workdir: str, *, progress: bool = True) -> dict:
    """Train per `config` in `workdir` (resuming if it holds checkpoints); returns last metrics."""
    tc = TrainConfig.from_config(config)
    init_distributed()
    mesh = setup.build_mesh(tc)
    cfg, params, tokenizer = setup.build_model(tc, mesh)
    stage = (SFTStage if tc.stage == "sft" else RLStage)(tc, cfg, tokenizer, mesh)
    return fit(config, workdir, stage, mesh=mesh, cfg=cfg, init_params=params, progress=progress)
