"""Rollout rows as training arrays, shared by standard RL (`train.rl`) and operator /
verifier rollouts (`train.operator_rl`): PDR paper §3.3 trains on the sampled completions,
V1 §5 adds the verifier rows."""

from __future__ import annotations

import numpy as np


def verifier_rows_per_prompt(rl) -> int:
    """V1 verifier rows per standard prompt: its pairs (pairwise) or its pointwise verifications."""
    if rl.verifier == "pairwise":
        return rl.verifier_pairs_per_prompt
    return (rl.verifier_pointwise_per_prompt or rl.samples_per_prompt) if rl.verifier == "pointwise" else 0


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


def pad_group(group: dict, width: int, pad_id: int) -> dict:
    """Right-pad a row group's `[R, T]` arrays to `[R, width]` (weight 0, segment 0)."""
    out = {}
    for k, v in group.items():
        if v.ndim == 2 and v.shape[1] < width:
            fill = pad_id if k in ("inputs", "targets") else 0
            v = np.concatenate([v, np.full((v.shape[0], width - v.shape[1]), fill, v.dtype)], axis=1)
        out[k] = v
    return out
