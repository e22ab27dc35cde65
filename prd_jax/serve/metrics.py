"""`/metrics` of `prd-jax serve` in the Prometheus text format (`prometheus_client`).

Counters: requests by endpoint and status, prompt and generated tokens (what `usage`
bills). Gauges read at scrape time: requests waiting for a slot, decode slots in use.
Histograms: time to first token (request received to its first token out of a decode
chunk) and time per output token after the first, per request.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self, engine):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("prd_jax_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("prd_jax_prompt_tokens", "prompt tokens of answered requests", registry=r)
        self.generated_tokens = Counter("prd_jax_generation_tokens", "generated tokens billed in usage", registry=r)
        Gauge("prd_jax_queued_requests", "requests waiting for a decode slot",
              registry=r).set_function(lambda: engine.queued_requests)
        Gauge("prd_jax_slots_in_use", "decode slots holding a row", registry=r).set_function(lambda: engine.slots_in_use)
        self.ttft = Histogram("prd_jax_time_to_first_token_seconds", "request received to its first token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("prd_jax_time_per_output_token_seconds",
                              "mean time per output token after the first, per request", buckets=LATENCY_BUCKETS,
                              registry=r)

    def text(self) -> bytes:
        return generate_latest(self.registry)
