"""Supervised fine-tuning loss on completion tokens (PDR paper §3.3 SFT stage; prompt masked).

Batches (from `prd_jax.data.sft`) hold `inputs`, `targets`, `positions`, `segment_ids`
(0 = padding; packed rows attend within their segment) and `weights` (1 on completion
targets only).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from prd_jax.data.sft import SFTBatches, pad
from prd_jax.train import router_aux
from prd_jax.train.chunked_xent import chunked_weighted_nll
from prd_jax.train.config import TrainConfig
from prd_jax.train.setup import sft_examples
from prd_jax.train.trainer import eval_loss

BATCH_KEYS = ("inputs", "targets", "positions", "segment_ids", "weights")


def sft_loss_fn(cfg, mesh=None):
    """`(params, batch) -> (nll_sum, token_count, metrics)` with token accuracy as a metric.

    The head runs in sequence chunks with its gradient formed in the forward pass
    (`chunked_xent.chunked_weighted_nll`): the `[B, T, V]` fp32 logits are never held whole
    (step times: docs/results/2026-12-01-train-step-mfu.md). The sum is `losses.sft_loss`'s (token mean).
    A mixture-of-experts model with `router_aux_loss_coef` > 0 adds the router load-balancing
    term over the completion tokens (`router_aux`, metric `router_aux_loss`).
    """
    def loss(params, batch):
        hidden, aux = router_aux.hidden_states(cfg, params, batch, mesh)
        w = batch["weights"].astype(jnp.float32)
        total, hits = chunked_weighted_nll(cfg, params, hidden, batch["targets"], w, mesh=mesh)
        count = jnp.sum(w)
        metrics = {"token_accuracy": (hits, count)}
        return router_aux.add_term(cfg, total, aux, batch, count, metrics), count, metrics

    return router_aux.attach(loss, cfg, lambda mb: jnp.sum(mb["weights"].astype(jnp.float32)))


class SFTStage:
    """Data side of SFT for `trainer.fit`: a resumable packed/padded iterator and eval loss."""

    def __init__(self, config, cfg, tokenizer, mesh):
        self.config = tc = TrainConfig.from_config(config)
        self.cfg, self.mesh = cfg, mesh
        train, held_out = sft_examples(tc, tokenizer)
        self.batches = SFTBatches(train, seq_len=tc.data.seq_len, batch_size=tc.batch_size, seed=tc.seed,
                                  mode=tc.data.mode, pad_id=tokenizer.pad_id)
        self.eval_batches = pad(held_out, tc.data.seq_len, tc.batch_size, pad_id=tokenizer.pad_id)[0] if held_out else []
        self.counts = self.batches.counts

    def loss_fn(self):
        return sft_loss_fn(self.cfg, self.mesh)

    def abstract_batch(self):
        shape = (self.config.batch_size, self.config.data.seq_len)
        return {k: jax.ShapeDtypeStruct(shape, jnp.float32 if k == "weights" else jnp.int32) for k in BATCH_KEYS}

    def next_batch(self, state, step, rows=None):
        return self.batches.next_rows(rows), {"data/epoch": float(self.batches.state()["epoch"])}

    def data_state(self):
        return self.batches.state()

    def restore_data(self, state):
        self.batches.restore(state)

    def evaluate(self, params, step):
        if not self.eval_batches:
            return {}
        return {"eval/loss": eval_loss(self.loss_fn(), params, self.eval_batches)}

