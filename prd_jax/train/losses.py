"""Token-level RL and SFT losses, computed in fp32.

Every loss returns an unreduced `(loss_sum, count)` (docs/design.md, "Principles"): to average over
micro-batches or hosts, sum the sums and the counts, then divide once. Metrics are dicts of
`(sum, count)` pairs reduced the same way. `weights [B, T]` select and weight the completion
tokens (0 on prompt and padding).
"""

from __future__ import annotations

from typing import Dict, Tuple

import jax
import jax.numpy as jnp

Array = jax.Array
SumCount = Tuple[Array, Array]

# The option tables: the functions below and `train.rl.RLConfig` validate against these alone.
AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")
LOSSES = ("cispo", "ppo")  # policy-loss kinds (`policy_loss(kind=...)`, `config.rl.loss`)
POLICY_KINDS = LOSSES
AUX_SFT_NORMALISERS = ("correct_token_mean", "policy")


def check_choice(field: str, value, table) -> None:
    """Raise ValueError naming `field`, its `value` and the allowed `table` unless `value` is in it."""
    if value not in table:
        raise ValueError(f"{field}={value!r}; allowed: {tuple(table)}")


def token_logprobs(logits: Array, targets: Array) -> Array:
    """`log softmax(logits)[b, t, targets[b, t]]` in fp32: `[B, T, V], [B, T] -> [B, T]`."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(logp, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]


def token_entropy(logits: Array) -> Array:
    """Entropy of the next-token distribution in fp32: `[B, T, V] -> [B, T]`."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def _check_aggregation(aggregation: str) -> None:
    check_choice("aggregation", aggregation, AGGREGATIONS)


def aggregate(per_token: Array, weights: Array, mode: str = "token_mean", norm_tokens: int = 0) -> SumCount:
    """Reduce `per_token [B, T]` under `weights [B, T]` to `(sum, count)`; the loss is sum / count.

    - "token_mean": sum of `w * x` over all tokens; count = sum of `w`.
    - "seq_mean_token_mean": each sequence's weighted mean, summed over sequences; count =
      number of sequences with positive total weight.
    - "seq_mean_token_sum_norm": Dr. GRPO's constant normaliser (Liu et al., arXiv 2503.20783,
      §3): sum of `w * x` over all tokens; count = B x `norm_tokens`, the rows of the batch
      times a token constant, whatever the rows' lengths and whichever rows carry weight.
      Dr. GRPO's loss sums each response's tokens, divides by the max generation length and
      averages over the batch's responses, so its denominator is a constant of the run. Here
      every row counts, a zero-weight one too (a V1-PairRL verifier slot without an
      admissible pair, `train.operator_rl.VerifierRollouts`): an RL batch has a fixed number
      of rows per config (`train.rl.batch_rows`), so the count is the same every step and
      a step with fewer weighted rows is not scaled up. `norm_tokens` defaults (0) to the
      row width T, also fixed per config (verl's "seq-mean-token-sum-norm" likewise divides
      by the padded width); Dr. GRPO names the max generation length. Any constant only
      rescales the learning rate (our wording).
    """
    _check_aggregation(mode)
    if per_token.shape != weights.shape:
        raise ValueError(f"weights must have the shape of per_token {per_token.shape}; got {weights.shape}")
    if norm_tokens < 0:
        raise ValueError(f"norm_tokens={norm_tokens}; must be >= 0 (0 = the row width T)")
    x, w = per_token.astype(jnp.float32), weights.astype(jnp.float32)
    if mode == "token_mean":
        return jnp.sum(w * x), jnp.sum(w)
    row_weight = jnp.sum(w, axis=-1)
    live = row_weight > 0
    if mode == "seq_mean_token_sum_norm":  # a constant: every row counts, weighted or not
        norm = float(norm_tokens or per_token.shape[-1])
        return jnp.sum(w * x), jnp.asarray(float(per_token.shape[0]) * norm, jnp.float32)
    row_mean = jnp.sum(w * x, axis=-1) / jnp.where(live, row_weight, 1.0)
    return jnp.sum(jnp.where(live, row_mean, 0.0)), jnp.sum(live.astype(jnp.float32))


def policy_loss(new_logp: Array, old_logp: Array, advantages: Array, weights: Array, *,
                kind: str = "cispo", eps_low: float = 0.2, eps_high: float = 0.28,
                aggregation: str = "token_mean", cispo_lower_clip: bool = False,
                prox_logp: Array = None, behaviour_weight_cap: float = 2.0,
                ) -> Tuple[Array, Array, Dict[str, SumCount]]:
    """Clipped policy-gradient loss; returns `(loss_sum, count, metrics)`.

    `new_logp, old_logp, weights: [B, T]`; `advantages: [B]` (one per sequence) or `[B, T]`.
    With ratio `r = exp(new - old)`, `lo = 1 - eps_low` and `hi = 1 + eps_high`:

    - "ppo": `-min(r A, clip(r, lo, hi) A)` with asymmetric ("clip-higher") bounds (DAPO,
      arXiv 2503.14476, §3.1). Clipped tokens carry no gradient. Always two-sided.
    - "cispo": `-stop_gradient(w) * A * new_logp` with the importance weight `w = min(r, hi)`,
      clipped from above only (MiniMax-M1, arXiv 2506.13585, §3.1: eps_low^IS is set large,
      i.e. no lower bound; the RL objective of the PDR paper, arXiv 2510.01123). Every token
      keeps a gradient. `cispo_lower_clip=True` (our option) also bounds it below:
      `w = clip(r, lo, hi)`; only then is `eps_low` used by CISPO.

    Decoupled (`prox_logp` given; `rl.decoupled`: stale rollouts, `train.async_rollouts`, or a
    lossy float8 decode cache): `old_logp` is the behaviour policy's (the sampler's record, one
    step stale or from the rounded cache) and `prox_logp`
    the proximal policy's (this step's starting params). AReaL's decoupled PPO objective (Fu et
    al., arXiv 2505.24298): the trust region is taken on `r = exp(new - prox)` (PPO's clip,
    CISPO's weight bound as above) and each token's term is multiplied by the behaviour
    importance weight `w = exp(prox - old)`, so the whole ratio is against the behaviour policy.
    `w` is truncated at `behaviour_weight_cap`, `min(w, C)`, as truncated importance sampling
    does (TIS, Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL
    Training"); AReaL instead drops the tokens above its cap. Ours: truncation, C = 2, and
    CISPO under the decoupled form. Without `prox_logp` nothing of this is computed.

    Metrics (token-weighted `(sum, count)`): "clip_fraction", the share of tokens where
    clipping is active (PPO: where the clipped term is the minimum and differs; CISPO: where
    `r > hi`, or `r < lo` with the lower clip on), and "ratio", the mean of `r`; with
    `prox_logp` also "behaviour_weight", the mean of the truncated `w`, and
    "behaviour_weight_truncated", the share of tokens with `w > C`.
    """
    check_choice("policy loss kind", kind, LOSSES)
    _check_aggregation(aggregation)
    if not (eps_low >= 0 and eps_high >= 0):
        raise ValueError(f"eps_low={eps_low}, eps_high={eps_high}; both must be >= 0")
    if cispo_lower_clip and kind != "cispo":
        raise ValueError(f"cispo_lower_clip=True needs kind='cispo'; got kind={kind!r} "
                         "(PPO's clip is always two-sided)")
    for name, value in (("old_logp", old_logp), ("weights", weights)):
        if value.shape != new_logp.shape:
            raise ValueError(f"{name} must have the shape of new_logp {new_logp.shape}; got {value.shape}")
    if advantages.shape not in (new_logp.shape[:1], new_logp.shape):
        raise ValueError(f"advantages must have shape [B]={new_logp.shape[:1]} or [B, T]="
                         f"{new_logp.shape}; got {advantages.shape}")

    new_logp = new_logp.astype(jnp.float32)
    old_logp = jax.lax.stop_gradient(old_logp.astype(jnp.float32))
    adv = jax.lax.stop_gradient(jnp.asarray(advantages, jnp.float32))
    if adv.ndim == 1:
        adv = adv[:, None]
    adv = jnp.broadcast_to(adv, new_logp.shape)
    lo, hi = 1.0 - eps_low, 1.0 + eps_high
    behaviour_weight = None
    if prox_logp is not None:
        if prox_logp.shape != new_logp.shape:
            raise ValueError(f"prox_logp must have the shape of new_logp {new_logp.shape}; got {prox_logp.shape}")
        if not behaviour_weight_cap >= 1.0:
            raise ValueError(f"behaviour_weight_cap={behaviour_weight_cap}; must be >= 1")
        prox_logp = jax.lax.stop_gradient(prox_logp.astype(jnp.float32))
        raw_weight = jnp.exp(prox_logp - old_logp)
        behaviour_weight = jnp.minimum(raw_weight, behaviour_weight_cap)
        old_logp = prox_logp  # the trust region's anchor
    ratio = jnp.exp(new_logp - old_logp)

    if kind == "ppo":
        # -min(rA, clip(r)A), written with an explicit mask so ties at the bounds keep the
        # unclipped gradient.
        clipped_ratio = jnp.clip(ratio, lo, hi)
        is_clipped = ((adv > 0) & (ratio > hi)) | ((adv < 0) & (ratio < lo))
        per_token = jnp.where(is_clipped, -jax.lax.stop_gradient(clipped_ratio) * adv, -ratio * adv)
    else:
        is_clipped = ratio > hi
        is_weight = jnp.minimum(ratio, hi)
        if cispo_lower_clip:
            is_clipped = is_clipped | (ratio < lo)
            is_weight = jnp.maximum(is_weight, lo)
        per_token = -jax.lax.stop_gradient(is_weight) * adv * new_logp
    if behaviour_weight is not None:
        per_token = behaviour_weight * per_token

    loss_sum, count = aggregate(per_token, weights, aggregation)
    w = weights.astype(jnp.float32)
    token_count = jnp.sum(w)
    metrics = {
        "clip_fraction": (jnp.sum(w * is_clipped.astype(jnp.float32)), token_count),
        "ratio": (jnp.sum(w * jax.lax.stop_gradient(ratio)), token_count),
    }
    if behaviour_weight is not None:
        metrics["behaviour_weight"] = (jnp.sum(w * behaviour_weight), token_count)
        metrics["behaviour_weight_truncated"] = (jnp.sum(w * (raw_weight > behaviour_weight_cap)), token_count)
    return loss_sum, count, metrics


def k3_kl(new_logp: Array, ref_logp: Array) -> Array:
    """Per-token k3 estimator of KL(new || ref): `exp(ref - new) - (ref - new) - 1` (Schulman,
    "Approximating KL divergence", 2020). Non-negative; aggregate with `aggregate`."""
    d = ref_logp.astype(jnp.float32) - new_logp.astype(jnp.float32)
    return jnp.exp(d) - d - 1.0


def sft_loss(logp: Array, weights: Array, aggregation: str = "token_mean") -> SumCount:
    """Negative log-likelihood of the completion tokens: `(sum, count)` of `-logp` under `weights`."""
    return aggregate(-logp.astype(jnp.float32), weights, aggregation)


def aux_sft_weights(weights: Array, correct: Array) -> Array:
    """`weights [B, T]` with the rows of incorrect rollouts zeroed (`correct [B]`), for the
    auxiliary SFT term on correct rollouts (alpha = 0.1 in the configs: ours, not stated in ../shared/papers/)."""
    if correct.shape != weights.shape[:1]:
        raise ValueError(f"correct must have shape [B]={weights.shape[:1]}; got {correct.shape}")
    return weights * correct.astype(bool).astype(weights.dtype)[:, None]


def aux_sft_scale(weights: Array, correct: Array, aggregation: str = "token_mean", norm_tokens: int = 0,
                  blocks: int = 1) -> Array:
    """Per-row factor `[B]` of the "correct_token_mean" normaliser: `correct[b] * N / C`.

    N is the policy loss's count under `aggregation` (what `aggregate` returns), C the number
    of completion tokens of correct rollouts (weights on rows with `correct > 0`). Both are
    taken per block of B / `blocks` consecutive rows, one block per optimizer update (RL
    mini-batches), so pass the whole (global) batch: then `sum(scale x NLL)` over a block,
    summed over any split of it into microbatches and divided by the block's summed policy
    counts, is the block's mean NLL over correct-rollout tokens, exactly. 0 on incorrect
    rows and in a block without a correct token.
    """
    if correct.shape != weights.shape[:1]:
        raise ValueError(f"correct must have shape [B]={weights.shape[:1]}; got {correct.shape}")
    if blocks < 1 or weights.shape[0] % blocks:
        raise ValueError(f"blocks={blocks}; must be >= 1 and divide the batch's {weights.shape[0]} rows")
    w = jnp.asarray(weights, jnp.float32).reshape(blocks, -1, weights.shape[-1])
    is_correct = (jnp.asarray(correct) > 0).reshape(blocks, -1)
    n = jax.vmap(lambda wb: aggregate(jnp.zeros_like(wb), wb, aggregation, norm_tokens)[1])(w)  # [blocks]
    c = jnp.sum(jnp.where(is_correct[..., None], w, 0.0), axis=(1, 2))  # [blocks]
    ratio = jnp.where(c > 0, n / jnp.where(c > 0, c, 1.0), 0.0)
    return jnp.where(is_correct, ratio[:, None], 0.0).reshape(-1)


def aux_sft_term(logp: Array, weights: Array, correct: Array, *, normaliser: str = "correct_token_mean",
                 aggregation: str = "token_mean", norm_tokens: int = 0,
                 scale: Array = None) -> Tuple[Array, SumCount]:
    """The auxiliary SFT (NLL) term on correct rollouts, as a share of the policy loss's sum.

    Returns `(aux_sum, nll)`: add `coef * aux_sum` to the policy `loss_sum`; after the one
    division by the policy count N the term is (C = correct-rollout completion tokens)
    - "correct_token_mean": `sum_correct(-logp) / C`, the mean NLL over correct-rollout tokens
      (VAPO, arXiv 2504.05118, its "Positive Example LM Loss", mu = 0.1). `scale [B]` is
      `aux_sft_scale` of the whole batch; None computes it from these arrays, which is the
      same only when they are the whole batch (one microbatch).
    - "policy": the policy loss's own normaliser, `aggregate(-logp, correct rows, aggregation)`
      / N; with "token_mean" that is `sum_correct(-logp) / (all completion tokens)`, i.e.
      the correct-token mean times the share of correct tokens (our wording).
    `nll` is the metric `(sum_correct(-logp), C)`, the mean NLL of correct-rollout tokens.
    Neither alpha = 0.1 nor the normaliser is stated in ../shared/papers/ (both ours).
    """
    check_choice("aux SFT normaliser", normaliser, AUX_SFT_NORMALISERS)
    nll = -jnp.asarray(logp, jnp.float32)
    aux_w = aux_sft_weights(jnp.asarray(weights, jnp.float32), correct)
    metric = (jnp.sum(aux_w * nll), jnp.sum(aux_w))
    if normaliser == "policy":
        return aggregate(nll, aux_w, aggregation, norm_tokens)[0], metric
    if scale is None:
        scale = aux_sft_scale(weights, correct, aggregation, norm_tokens)
    if scale.shape != weights.shape[:1]:
        raise ValueError(f"scale must have shape [B]={weights.shape[:1]}; got {scale.shape}")
    scale = jax.lax.stop_gradient(jnp.asarray(scale, jnp.float32))
    return jnp.sum(aux_w * scale[:, None] * nll), metric
