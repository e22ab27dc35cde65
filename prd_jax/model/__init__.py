"""Decoder LM: configs, Flax model, weight import, tokenizer, `load`."""

from prd_jax.model.config import NAMED_CONFIGS, ModelConfig, get_model_config
from prd_jax.model.decode import KVCache, init_cache
from prd_jax.model.decoder import forward, init_params
from prd_jax.model.loader import LoadedModel, load

__all__ = ["NAMED_CONFIGS", "ModelConfig", "get_model_config", "KVCache", "forward",
           "init_cache", "init_params", "LoadedModel", "load"]
