"""RL for verifiable rewards: rollout -> reward -> advantage -> update (PDR paper §3.3, §4.2).

One trainer step is one rollout batch: P prompts x G samples from the in-graph sampler
(prefill-once fan-out), recording the sampling policy's logprobs; rewards from
`prd_jax.rewards` (math grading on the host); group advantages (GRPO / Dr.GRPO / RLOO);
then `rl.updates_per_batch` (mu) optimizer updates on that batch inside one compiled step.

The loss (per completion token, `losses.policy_loss`): PPO-clip with asymmetric
eps_low/eps_high or CISPO, aggregated token-mean or sequence-mean-token-mean; plus
`kl_coef` x k3 KL to the frozen initial policy and `aux_sft_coef` x NLL on the tokens of
correct rollouts (the PDR paper's auxiliary SFT term, alpha = 0.1). Both extra terms use
the policy loss's denominator (all completion tokens), so (sum, count) stays exact under
accumulation.
"""

from __future__ import annotations

import dataclasses
import time
import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.model.decoder import forward
from prd_jax.operators import prompts as P
from prd_jax.train import advantages as adv_lib
from prd_jax.train.losses import aggregate, aux_sft_weights, k3_kl, policy_loss, token_entropy, token_logprobs

ROLLOUT_KEYS = ("inputs", "targets", "positions", "segment_ids", "weights", "old_logp", "ref_logp",
                "advantages", "correct")


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Validated `config.rl` (field errors name the field)."""

    prompts_per_step: int = 4
    samples_per_prompt: int = 8
    max_prompt_tokens: int = 128
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    advantage: str = "grpo"
    loss: str = "cispo"
    eps_low: float = 0.2
    eps_high: float = 0.28
    aggregation: str = "token_mean"
    kl_coef: float = 0.0
    aux_sft_coef: float = 0.1
    updates_per_batch: int = 1

    def __post_init__(self):
        for f in ("prompts_per_step", "samples_per_prompt", "max_prompt_tokens", "max_new_tokens",
                  "updates_per_batch"):
            if getattr(self, f) < 1:
                raise ValueError(f"config.rl.{f}={getattr(self, f)}; must be >= 1")
        if self.advantage not in adv_lib.KINDS:
            raise ValueError(f"config.rl.advantage={self.advantage!r}; allowed: {adv_lib.KINDS}")
        if self.loss not in ("ppo", "cispo"):
            raise ValueError(f"config.rl.loss={self.loss!r}; allowed: ('ppo', 'cispo')")
        if self.aggregation not in ("token_mean", "seq_mean_token_mean"):
            raise ValueError(f"config.rl.aggregation={self.aggregation!r}; allowed: token_mean, seq_mean_token_mean")
        if self.kl_coef < 0 or self.aux_sft_coef < 0:
            raise ValueError("config.rl.kl_coef and config.rl.aux_sft_coef must be >= 0")

    @classmethod
    def from_config(cls, config) -> "RLConfig":
        rl = config.rl.to_dict() if hasattr(config.rl, "to_dict") else dict(config.rl)
        unknown = set(rl) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"config.rl: unknown fields {sorted(unknown)}; allowed: {sorted(cls.__dataclass_fields__)}")
        return cls(**rl)


def rl_loss_fn(cfg, mesh, rl: RLConfig):
    """`(params, batch) -> (loss_sum, count, metrics)` for one rollout microbatch."""
    def loss(params, b):
        logits, _ = forward(cfg, params, b["inputs"], b["positions"], segment_ids=b["segment_ids"], mesh=mesh)
        logp = token_logprobs(logits, b["targets"])
        w = b["weights"]
        total, count, metrics = policy_loss(logp, b["old_logp"], b["advantages"], w, kind=rl.loss,
                                            eps_low=rl.eps_low, eps_high=rl.eps_high, aggregation=rl.aggregation)
        metrics = dict(metrics)
        metrics["entropy"] = aggregate(jax.lax.stop_gradient(token_entropy(logits)), w)
        kl = k3_kl(logp, b["ref_logp"])
        metrics["kl"] = aggregate(jax.lax.stop_gradient(kl), w)
        if rl.kl_coef:
            total = total + rl.kl_coef * aggregate(kl, w, rl.aggregation)[0]
        if rl.aux_sft_coef:
            sft_w = aux_sft_weights(w, b["correct"])
            total = total + rl.aux_sft_coef * aggregate(-logp, sft_w, rl.aggregation)[0]
        return total, count, metrics

    return loss


def sequences_to_batch(prompt_tok, prompt_len, comp_tok, comp_len, comp_logp) -> dict:
    """Left-padded prompts `[R, Pw]` + completions `[R, N]` -> next-token training arrays `[R, Pw+N-1]`.

    Weights are 1 exactly on targets that are completion tokens; `old_logp` holds the
    sampler's logprob of each such target (0 elsewhere).
    """
    r, pw = prompt_tok.shape
    n = comp_tok.shape[1]
    seq = np.concatenate([prompt_tok, comp_tok], axis=1)
    col = np.arange(pw + n)[None, :]
    start = pw - prompt_len[:, None]
    valid = (col >= start) & (col < pw + comp_len[:, None])
    positions = np.maximum(col - start, 0)
    is_comp = (col >= pw) & valid
    old = np.zeros((r, pw + n), np.float32)
    old[:, pw:] = comp_logp * (np.arange(n)[None, :] < comp_len[:, None])
    return {"inputs": seq[:, :-1].astype(np.int32), "targets": seq[:, 1:].astype(np.int32),
            "positions": positions[:, :-1].astype(np.int32), "segment_ids": valid[:, :-1].astype(np.int32),
            "weights": is_comp[:, 1:].astype(np.float32), "old_logp": old[:, 1:]}


def _math_reward(text: str, answer: str) -> float:
    from prd_jax.rewards.math import grade

    return float(grade(text, answer))


def _to_host(tree):
    """Device outputs -> host numpy on every process (all-gathered when multi-host)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


class RLStage:
    """Data side of RL for `trainer.fit`: problems, rollouts, rewards, advantages."""

    def __init__(self, config, cfg, tokenizer, mesh):
        from prd_jax.train.setup import rl_problems

        self.config, self.cfg, self.tok, self.mesh = config, cfg, tokenizer, mesh
        self.rl = RLConfig.from_config(config)
        rows = rl_problems(config)
        self.problems, self.skipped = [], 0
        for row in rows:
            ids = self.prompt_ids(row["problem"])
            if len(ids) > self.rl.max_prompt_tokens:
                self.skipped += 1
                continue
            self.problems.append((ids, str(row["answer"])))
        if len(self.problems) < self.rl.prompts_per_step:
            raise ValueError(f"{len(self.problems)} problems fit config.rl.max_prompt_tokens="
                             f"{self.rl.max_prompt_tokens} ({self.skipped} too long); need at least "
                             f"config.rl.prompts_per_step={self.rl.prompts_per_step}")
        self.epoch, self.offset = 0, 0
        self.ref_params = None
        self.reward_fn = _math_reward  # (completion text, gold answer) -> reward
        self._generate = jax.jit(self._rollout_fn, static_argnames=("scfg",))

    # -- prompts and data position
    def prompt_ids(self, problem: str) -> list:
        text = P.SOLVE.user.replace("{{}}", "{}").replace("{problem}", problem)
        return self.tok.encode_chat([{"role": "user", "content": text}]) if hasattr(self.tok, "encode_chat") \
            else self.tok.encode(self.tok.apply_chat_template([{"role": "user", "content": text}]))

    def _take(self, k: int) -> list:
        out = []
        while len(out) < k:
            order = np.random.default_rng([self.config.seed, self.epoch]).permutation(len(self.problems))
            if self.offset >= len(order):
                self.epoch, self.offset = self.epoch + 1, 0
                continue
            out.append(self.problems[order[self.offset]])
            self.offset += 1
        return out

    def data_state(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    def restore_data(self, state) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])

    # -- shapes and loss
    @property
    def rows(self) -> int:
        return self.rl.prompts_per_step * self.rl.samples_per_prompt

    def abstract_batch(self):
        t = self.rl.max_prompt_tokens + self.rl.max_new_tokens - 1
        shapes = {k: ((self.rows, t), jnp.float32) for k in ("weights", "old_logp", "ref_logp")}
        shapes.update({k: ((self.rows, t), jnp.int32) for k in ("inputs", "targets", "positions", "segment_ids")})
        shapes.update(advantages=((self.rows,), jnp.float32), correct=((self.rows,), jnp.float32))
        return {k: jax.ShapeDtypeStruct(s, d) for k, (s, d) in shapes.items()}

    @property
    def updates_per_batch(self) -> int:
        return self.rl.updates_per_batch

    def loss_fn(self):
        return rl_loss_fn(self.cfg, self.mesh, self.rl)

    # -- rollout
    def _rollout_fn(self, params, prompts, lengths, keys, scfg):
        from prd_jax.operators.lm import ModelLM

        return ModelLM(params, self.cfg, self.tok.pad_id, self.mesh).generate(prompts, lengths, keys, scfg)

    def _ref_logp(self, batch: dict) -> np.ndarray:
        if self.ref_params is None:
            return batch["old_logp"]
        if not hasattr(self, "_ref_forward"):
            self._ref_forward = jax.jit(lambda p, b: token_logprobs(
                forward(self.cfg, p, b["inputs"], b["positions"], segment_ids=b["segment_ids"], mesh=self.mesh)[0],
                b["targets"]))
        keys = ("inputs", "positions", "segment_ids", "targets")
        return np.asarray(_to_host(self._ref_forward(self.ref_params, {k: batch[k] for k in keys})))

    def next_batch(self, state, step: int, rows=None):
        from prd_jax.sampling import SamplingConfig

        rl = self.rl
        if rl.kl_coef and self.ref_params is None:
            self.ref_params = jax.tree.map(jnp.copy, state.params)  # frozen reference: the starting policy
        chosen = self._take(rl.prompts_per_step)
        pw = rl.max_prompt_tokens
        prompts = np.full((len(chosen), pw), self.tok.pad_id, np.int32)
        lengths = np.array([len(ids) for ids, _ in chosen], np.int32)
        for i, (ids, _) in enumerate(chosen):
            prompts[i, pw - len(ids):] = ids
        keys = jax.random.split(jax.random.fold_in(state.rng, step), len(chosen))
        scfg = SamplingConfig(rl.max_new_tokens, rl.temperature, rl.top_p, 0, rl.samples_per_prompt,
                              tuple(self.tok.stop_ids))
        t0 = time.perf_counter()
        out = _to_host(self._generate(state.params, jnp.asarray(prompts), jnp.asarray(lengths), keys, scfg=scfg))
        t1 = time.perf_counter()
        g = rl.samples_per_prompt
        texts = [self.tok.decode(out.tokens[r, :out.lengths[r]].tolist()) for r in range(self.rows)]
        correct = np.array([self.reward_fn(texts[r], chosen[r // g][1]) for r in range(self.rows)], np.float32)
        rewards = correct.reshape(-1, g)
        advantages = np.asarray(adv_lib.compute(rl.advantage, jnp.asarray(rewards))).reshape(-1)
        batch = sequences_to_batch(np.repeat(prompts, g, axis=0), np.repeat(lengths, g), out.tokens,
                                   out.lengths, out.logprobs)
        batch.update(advantages=advantages.astype(np.float32), correct=correct)
        batch["ref_logp"] = self._ref_logp(batch)
        if rows is not None:  # every host graded the (small) rollout; it feeds its own rows
            batch = {k: v[np.asarray(rows)] for k, v in batch.items()}
        metrics = {"reward/mean": float(rewards.mean()), "accuracy": float(correct.mean()),
                   "response_length": float(out.lengths.mean()), "time/rollout_s": t1 - t0,
                   "time/reward_s": time.perf_counter() - t1,
                   "rollout/tokens_per_s": float(out.lengths.sum()) / max(t1 - t0, 1e-9),
                   "rollout/compilations": float(self._generate._cache_size())}
        return batch, metrics

