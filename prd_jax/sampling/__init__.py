"""In-graph sampler: prefill once, fan out to M samples, decode in `lax.while_loop`.

One module per concern:
- `settings`: `Sampling` (the one sampling config), `SamplingConfig` (one call), `SampleOutput`;
- `choose`: token choice, one per-row chooser (`RowSampling`, `choose_rows`) for the sampler
  and the serve engine, blocked argmax and draws, logprobs, forced end of thinking;
- `prefill`: prompts into a KV cache (one, row-chunked, or length-grouped), the fan-out;
- `decode_loop`: `generate`, the pure jitted core: the decode loop, compaction phases, growing caches;
- `buckets`: a call's static shapes (length buckets, prompt groups, row chunks, phases);
- `host`: `Sampler`, the host edge: bucketing, a compile cache with logging, trimming.
"""

from prd_jax.sampling.buckets import (bucket, cache_windows, compaction_sizes, length_bucket, prompt_groups_apply,
                                      prompt_widths, row_chunks)
from prd_jax.sampling.choose import (SAMPLE_BLOCK, RowSampling, blocked_argmax, blocked_categorical, choose_rows,
                                     choose_tokens, chosen_logprob, filter_rows, force_think_end, top_k_mask,
                                     top_p_mask, vocab_blocks)
from prd_jax.sampling.decode_loop import compact_rows, generate, sample_keys
from prd_jax.sampling.host import Sampler
from prd_jax.sampling.prefill import PREFILL_ROWS, chunked_prefill, grouped_prefill, next_logits, prefill, prefill_windows
from prd_jax.sampling.settings import CONFIG_KEYS, DECODE_LAYERS, SampleOutput, Sampling, SamplingConfig

__all__ = ["CONFIG_KEYS", "DECODE_LAYERS", "PREFILL_ROWS", "SAMPLE_BLOCK", "RowSampling", "SampleOutput", "Sampler",
           "Sampling", "SamplingConfig", "blocked_argmax", "blocked_categorical", "bucket", "cache_windows",
           "choose_rows", "choose_tokens", "chosen_logprob", "chunked_prefill", "compact_rows", "compaction_sizes",
           "filter_rows", "force_think_end", "generate", "grouped_prefill", "length_bucket",
           "next_logits", "prefill", "prefill_windows", "prompt_groups_apply", "prompt_widths", "row_chunks",
           "sample_keys", "top_k_mask", "top_p_mask", "vocab_blocks"]
