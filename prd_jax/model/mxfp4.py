"""MXFP4 expert weights, as the released GPT-OSS checkpoints store them.

OCP Microscaling (MX) v1.0 format, FP4 elements: a block of 32 values shares one E8M0 scale
(`2 ** (s - 127)`, s a uint8); each value is FP4 E2M1 (1 sign, 2 exponent, 1 mantissa bit),
two per byte, the low nibble first. For an expert weight `W [E, in, out]` the checkpoint
holds `<name>_blocks [E, out, in / 32, 16]` (uint8) and `<name>_scales [E, out, in / 32]`
(uint8): the rows are output features, each row's input features are cut into blocks of 32.
"""

from __future__ import annotations

import numpy as np

# E2M1 code -> value (code = sign << 3 | exponent << 1 | mantissa).
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)
BLOCK = 32  # values per scale
SCALE_BIAS = 127


def dequantize_rows(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """`blocks [..., G, 16]` uint8 and `scales [..., G]` uint8 -> fp32 `[..., G * 32]`."""
    blocks, scales = np.asarray(blocks), np.asarray(scales)
    if blocks.dtype != np.uint8 or scales.dtype != np.uint8:
        raise ValueError(f"MXFP4 blocks/scales dtype {blocks.dtype}/{scales.dtype}; expected uint8/uint8")
    if blocks.shape[-1] != BLOCK // 2 or blocks.shape[:-1] != scales.shape:
        raise ValueError(f"MXFP4 blocks shape {blocks.shape} and scales shape {scales.shape}: expected "
                         f"[..., G, {BLOCK // 2}] and [..., G]")
    out = np.empty((*blocks.shape[:-1], BLOCK), np.float32)
    out[..., 0::2] = E2M1_VALUES[blocks & 0x0F]
    out[..., 1::2] = E2M1_VALUES[blocks >> 4]
    out = np.ldexp(out, scales.astype(np.int32)[..., None] - SCALE_BIAS)
    return out.reshape(*blocks.shape[:-2], blocks.shape[-2] * BLOCK)


def dequantize_expert_weight(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """An expert weight from its `_blocks [E, out, G, 16]` / `_scales [E, out, G]` -> fp32
    `[E, in, out]` (in = 32 G), the layout of the dense checkpoints' `gate_up_proj` / `down_proj`."""
    if np.ndim(blocks) != 4:
        raise ValueError(f"MXFP4 expert blocks shape {np.shape(blocks)}: expected [experts, out, in/32, 16]")
    return np.swapaxes(dequantize_rows(blocks, scales), 1, 2)
