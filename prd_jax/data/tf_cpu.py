"""Import TensorFlow for input pipelines only: keep it off GPUs so it leaves them to JAX."""

from __future__ import annotations

import tensorflow as tf

try:
    # TF is only used for tf.data / TFDS / seqio here; by default it would reserve all GPU
    # memory. This must run before TF initialises its devices, and fails harmlessly after.
    tf.config.set_visible_devices([], "GPU")
except (RuntimeError, ValueError):  # pragma: no cover - TF already initialised its devices
    pass

__all__ = ["tf"]
