"""`prd-jax train`: build the stage a config names and run the shared loop.

`config.stage` is "sft" or "rl" (RL variants are `config.rl.*`). See `trainer.fit`.
"""

from __future__ import annotations

from prd_jax.train import setup

STAGES = ("sft", "rl")


def train(config, workdir: str, *, progress: bool = True) -> dict:
    """Train per `config` in `workdir` (resuming if it holds checkpoints); returns last metrics."""
    from prd_jax.mesh import init_distributed
    from prd_jax.train.trainer import fit

    if config.stage not in STAGES:
        raise ValueError(f"config.stage={config.stage!r}; allowed: {STAGES}")
    init_distributed()
    mesh = setup.build_mesh(config)
    cfg, params, tokenizer = setup.build_model(config, mesh)
    if config.stage == "sft":
        from prd_jax.train.sft import SFTStage

        stage = SFTStage(config, cfg, tokenizer, mesh)
    else:
        from prd_jax.train.rl import RLStage

        stage = RLStage(config, cfg, tokenizer, mesh)
    return fit(config, workdir, stage, mesh=mesh, cfg=cfg, init_params=params, progress=progress)
