"""What a sampler call is asked and what it returns: the run's `Sampling` (declared once),
a call's `SamplingConfig` (the run's settings plus the call's budget) and `SampleOutput`."""

from __future__ import annotations

import dataclasses
from typing import Optional

import flax
import jax
import ml_collections

Array = jax.Array

@dataclasses.dataclass(frozen=True, kw_only=True)
class Sampling:
    """The one sampling config: how tokens are drawn, and the sampler's cost options.

    Declared here once. Eval and RL read it from `config.sampling` (`from_config`), the
    operators' context carries it, and every sampler call is a `SamplingConfig`: this plus
    the call's own budget. The draw: `temperature` (0 = greedy), `top_p` (1.0 = off),
    `top_k` (0 = off), `stop_ids` (the tokenizer's, filled in when a run starts; not a
    config key). The PDR paper samples at T = 1.0, top-p 1.0 (arXiv 2510.01123 §4); V1 at
    T = 0.6 (code) or 1.0 (math), top-p 0.95 (arXiv 2603.04304 §4).

    The cost options change no row's tokens (tested), only memory and time:
    - `max_rows`: most decode rows (prompts x samples) in flight per call; 0 = all;
    - `compact_min_rows` > 0: shrink the decode batch as rows finish, down to this many
      rows, each phase `compact_ratio` of the previous one's rows;
    - `prefill_groups` > 1: prefill length-sorted row groups over their own slot windows;
    - `cache_window` > 0: the first decode phase's cache grows this many slots at a time;
    - `prompt_groups` > 1: length-sorted prompt groups, each over its own width (`Sampler`
      on one device: `prd-jax generate` and `prd-jax serve`);
    - `decode_layers`: "unrolled" (per-layer weights and caches) or "scan" (stacked).

    One option trades exactness for memory traffic, and so changes tokens:
    - `kv_cache_dtype`: the dtype the decode step keeps its keys and values in ("" = the model's
      compute dtype; "float8_e4m3fn" or "float8_e5m2" halve a bf16 cache's bytes, which each
      decode step reads whole: docs/scaling.md). The prompt's prefill attends in the compute
      dtype; its keys and values are then stored rounded, as is every generated token's. Unrolled
      decode only. A sampler's log-probabilities then come from a slightly different policy
      than the trainer's: RL then takes the decoupled loss (`rl.decoupled_loss="auto"`), which
      weighs them as behaviour log-probabilities (`losses.policy_loss`).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_ids: tuple = ()
    max_rows: int = 0
    compact_min_rows: int = 0
    compact_ratio: float = 0.5
    prefill_groups: int = 0
    cache_window: int = 0
    prompt_groups: int = 0
    decode_layers: str = "unrolled"
    kv_cache_dtype: str = ""

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"sampling.temperature={self.temperature}; must be >= 0 (0 = greedy)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling.top_p={self.top_p}; allowed range (0, 1]")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k={self.top_k}; must be >= 0 (0 = off)")
        if self.max_rows < 0:
            raise ValueError(f"sampling.max_rows={self.max_rows}; must be >= 0 (0 = no limit)")
        if self.compact_min_rows < 0:
            raise ValueError(f"sampling.compact_min_rows={self.compact_min_rows}; must be >= 0 (0 = no compaction)")
        if not 0.0 < self.compact_ratio < 1.0:
            raise ValueError(f"sampling.compact_ratio={self.compact_ratio}; allowed range (0, 1) (0.5 = halve per phase)")
        if self.prefill_groups < 0:
            raise ValueError(f"sampling.prefill_groups={self.prefill_groups}; must be >= 0 (0 or 1 = one prefill)")
        if self.prompt_groups < 0:
            raise ValueError(f"sampling.prompt_groups={self.prompt_groups}; must be >= 0 (0 or 1 = one prompt width)")
        if self.cache_window < 0:
            raise ValueError(f"sampling.cache_window={self.cache_window}; must be >= 0 (0 = all generation slots at once)")
        if self.decode_layers not in DECODE_LAYERS:
            raise ValueError(f"sampling.decode_layers={self.decode_layers!r}; allowed: {DECODE_LAYERS}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"sampling.kv_cache_dtype={self.kv_cache_dtype!r}; allowed: {KV_CACHE_DTYPES} "
                             "('' = the model's compute dtype)")
        if self.kv_cache_dtype and self.decode_layers != "unrolled":
            raise ValueError(f"sampling.kv_cache_dtype={self.kv_cache_dtype!r} needs decode_layers='unrolled' "
                             f"(the per-layer decode caches); got {self.decode_layers!r}")
        object.__setattr__(self, "stop_ids", tuple(int(s) for s in self.stop_ids))

    def check_in_graph(self) -> None:
        """Raise unless every option applies to in-graph calls (eval, RL): `prompt_groups`
        belongs to the host `Sampler` (`prd-jax generate`, `prd-jax serve`)."""
        if self.prompt_groups > 1:
            raise ValueError(f"sampling.prompt_groups={self.prompt_groups} applies to the host `Sampler` only "
                             "(prd-jax generate, prd-jax serve); eval and RL calls run in-graph: allowed 0 or 1")

    def settings(self) -> dict:
        """The fields of `Sampling` alone, by name (a `SamplingConfig`'s call fields left out)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Sampling)}

    def to_config(self):
        """`config.sampling` for a config file: every config key (all but `stop_ids`)."""
        return ml_collections.ConfigDict({k: v for k, v in self.settings().items() if k in CONFIG_KEYS})

    @classmethod
    def from_config(cls, node, stop_ids=()) -> "Sampling":
        """Validated `Sampling` from `config.sampling` (a ConfigDict or dict; None: the
        defaults) and the tokenizer's `stop_ids`. An unknown key raises, naming the keys allowed."""
        if isinstance(node, Sampling):
            return dataclasses.replace(node, stop_ids=tuple(stop_ids) or node.stop_ids)
        values = {} if node is None else dict(node.to_dict() if hasattr(node, "to_dict") else node)
        unknown = sorted(set(values) - set(CONFIG_KEYS))
        if unknown:
            raise ValueError(f"config.sampling: unknown keys {unknown}; allowed: {list(CONFIG_KEYS)}")
        return cls(**values, stop_ids=tuple(stop_ids))


DECODE_LAYERS = ("unrolled", "scan")
KV_CACHE_DTYPES = ("", "bfloat16", "float8_e4m3fn", "float8_e5m2")
CONFIG_KEYS = tuple(f.name for f in dataclasses.fields(Sampling) if f.name != "stop_ids")  # config.sampling.*


@dataclasses.dataclass(frozen=True)
class SamplingConfig(Sampling):
    """One sampler call: the run's `Sampling` plus the call's generation budget
    `max_new_tokens`, its samples per prompt and its thinking budget. Static: part of the
    compile key. Only `max_new_tokens` is positional; build one from a run's settings with
    `SamplingConfig.of(sampling, max_new_tokens, num_samples=...)`.
    """

    max_new_tokens: int
    num_samples: int = dataclasses.field(default=1, kw_only=True)
    # > 0: a row still thinking after this many tokens gets `think_end` (the end-of-thinking
    # marker ids, e.g. Qwen3's `</think>`) forced in, then answers (`force_think_end`)
    think_budget: int = dataclasses.field(default=0, kw_only=True)
    think_end: tuple = dataclasses.field(default=(), kw_only=True)

    def __post_init__(self):
        super().__post_init__()
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}; must be >= 1")
        if self.num_samples < 1:
            raise ValueError(f"num_samples={self.num_samples}; must be >= 1")
        if self.max_rows and self.max_rows < self.num_samples:
            raise ValueError(f"max_rows={self.max_rows}; must be 0 (no limit) or >= num_samples="
                             f"{self.num_samples} (one prompt's samples run together)")
        if self.think_budget < 0:
            raise ValueError(f"think_budget={self.think_budget}; must be >= 0 (0 = no forced end of thinking)")
        if self.think_budget and not self.think_end:
            raise ValueError(f"think_budget={self.think_budget} needs think_end, the end-of-thinking marker ids "
                             "(the tokenizer has no `</think>`: allowed think_budget=0)")
        if self.think_budget and self.think_budget + len(self.think_end) >= self.max_new_tokens:
            raise ValueError(f"think_budget={self.think_budget} + the {len(self.think_end)}-token marker leaves no "
                             f"answer tokens in max_new_tokens={self.max_new_tokens}; allowed: think_budget < "
                             f"{self.max_new_tokens - len(self.think_end)}")
        object.__setattr__(self, "think_end", tuple(int(t) for t in self.think_end))

    @classmethod
    def of(cls, sampling: Sampling, max_new_tokens: int, **call) -> "SamplingConfig":
        """The call of `max_new_tokens` under the run's `sampling`; `call` sets `num_samples`,
        `think_budget`, `think_end` or overrides a `Sampling` field for this call alone."""
        return cls(max_new_tokens, **{**sampling.settings(), **call})


@flax.struct.dataclass
class SampleOutput:
    """Generated rows `[R = B*M]`: tokens/logprobs `[R, N]`, padded after each row's end.

    `lengths` counts generated tokens including the stop token; `stopped` says whether a
    stop id ended the row (else it hit `max_new_tokens`). A remote LM
    (`prd_jax.backends.remote_lm`) also returns what its server billed per row,
    `billed_in` (usage.prompt_tokens) and `billed_out` (usage.completion_tokens, hidden
    reasoning included); None means the budgets count the prompt and `lengths` themselves.
    """

    tokens: Array
    logprobs: Array
    lengths: Array
    stopped: Array
    billed_in: Optional[Array] = None
    billed_out: Optional[Array] = None
