"""`RLConfig`: the validated `config.rl` of an RL run (PDR paper §3.3, §4.2; V1 §5), and the
option tables it checks against. `train.config.TrainConfig` holds one as its `rl` group; the
RL stage (`train.rl.RLStage`) reads it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from prd_jax import prompts as P
from prd_jax.config_schema import MOVED, check_moved
from prd_jax.operators.registry import build_spec, operator_for
from prd_jax.operators.specs import OperatorSpec, Sampling
from prd_jax.sampling import SamplingConfig
from prd_jax.train import advantages as adv_lib
from prd_jax.train.losses import AGGREGATIONS, AUX_SFT_NORMALISERS, LOSSES, check_choice

CODE_REWARDS = ("fraction", "all_pass")
GRADIENT_TARGETS = ("refine", "drafts_and_refine")
VERIFIERS = ("none", "pairwise", "pointwise")
VERIFIER_BASELINES = ("group", "batch")  # per prompt group (Dr. GRPO) or the whole step's verifier rows
VERIFIER_SAMPLES = ("policy", "frozen_base")  # whose rollouts the verifier rows quote
OFF_POLICY_STEPS = (0, 1)  # rollout staleness: on-policy, or one step (`train.async_rollouts`)
DECOUPLED_LOSS = ("auto", "on", "off")  # the proximal forward and truncated behaviour weight (`losses.policy_loss`)


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Validated `config.rl` (field errors name the field).

    - `loss="cispo"` clips the importance weight from above only, `min(r, 1 + eps_high)`
      (MiniMax-M1, arXiv 2506.13585, §3.1: no lower bound), so `eps_low` is unused unless
      `cispo_lower_clip=True` (ours) asks for `clip(r, 1 - eps_low, 1 + eps_high)`. PPO's clip
      is always two-sided.
    - `aux_sft_coef` x the NLL of correct-rollout tokens, normalised by `aux_sft_normaliser`:
      "correct_token_mean" (default): the mean over correct-rollout completion tokens, an SFT
      loss on the correct samples (as VAPO's positive-example LM loss, arXiv 2504.05118);
      exact per optimizer update when the batch carries `aux_sft_scale`
      (`losses.aux_sft_scale` of the global batch, one block per mini-batch), else computed
      over each microbatch. "policy": the policy loss's denominator (token_mean: all
      completion tokens, correct or not), i.e. the correct-token mean times the correct
      share. The term, alpha = 0.1 and this normaliser are ours: the PDR paper's text in
      ../shared/papers/ states no RL objective.
    """

    prompts_per_step: int = 4
    samples_per_prompt: int = 8
    max_prompt_tokens: int = 128
    max_new_tokens: int = 128
    advantage: str = "grpo"
    loss: str = "cispo"
    eps_low: float = 0.2
    eps_high: float = 0.28
    aggregation: str = "token_mean"
    kl_coef: float = 0.0
    aux_sft_coef: float = 0.1
    aux_sft_normaliser: str = "correct_token_mean"  # or "policy" (losses.aux_sft_term)
    cispo_lower_clip: bool = False  # CISPO: also clip the IS weight below at 1 - eps_low (ours)
    updates_per_batch: int = 1  # epochs over each rollout batch
    minibatches: int = 1  # optimizer updates per epoch, each on 1/minibatches of the rows
    # operator-consistent RL (PDR paper §3.3): share of each step's prompts given PDR-round rollouts
    operator_fraction: float = 0.0
    operator: Any = None  # operator spec: a dict of its fields, `type` a registered name (default "pdr")
    gradient_targets: str = "refine"
    # V1 §5 self-verification objective
    verifier: str = "none"
    verifier_coef: float = 1.0
    verifier_threshold: float = 0.2
    verifier_pairs_per_prompt: int = 4
    verifier_max_new_tokens: int = 64
    verifier_candidate_max_tokens: int = 128
    verifier_pointwise_per_prompt: int = 0  # pointwise rows per prompt (0 = every one of its G rollouts)
    verifier_baseline: str = "group"
    verifier_samples: str = "policy"
    seed_offset: int = 0
    code_reward: str = "fraction"  # code tasks: "fraction" of tests passed or "all_pass" (1 when all pass)
    templates: str = "default"  # prompt set (prompts.TEMPLATE_SETS) of rollouts and judges
    # the width of a problem quoted in operator / verifier prompts (0 = max_prompt_tokens);
    # standard rollout prompts are max_prompt_tokens wide
    max_problem_tokens: int = 0
    # held-out eval every config.eval_every steps (`rl_eval`): the split ("" = the task's default,
    # "test" for built-in tasks), its first eval_problems problems, and the operators run on them
    # (None = Long-CoT at max_new_tokens, plus `operator` for operator RL; else entries as an eval
    # config's `operators`, each with an optional `name` for its metrics)
    eval_split: str = ""
    eval_problems: int = 8
    eval_operators: Optional[tuple] = None
    # sample rollouts as text every log_rollouts_every steps (0 = off), log_rollouts of them (`rollout_log`)
    log_rollouts_every: int = 0
    log_rollouts: int = 4
    # how rollout, operator and verifier calls sample, and their memory bounds (`max_rows`:
    # decode rows in flight per call): `config.sampling`, the one sampling config
    sampling: Sampling = Sampling()
    # one-step-asynchronous RL (`train.async_rollouts`): 1 = step t+1's rollouts are generated with
    # the step-t weights while step t trains; the loss's decoupled correction truncates the
    # behaviour weight at off_policy_weight_cap (`losses.policy_loss`)
    off_policy_steps: int = 0
    off_policy_weight_cap: float = 2.0
    # the decoupled loss (`losses.policy_loss` with `prox_logp`): "auto" = on where the sampler's
    # policy is not the trainer's, i.e. off_policy_steps=1 or a float8 `sampling.kv_cache_dtype`
    # (`decoupled`); "on" also for an exact sampler; "off" needs off_policy_steps=0
    decoupled_loss: str = "auto"

    def __post_init__(self):
        for f in ("prompts_per_step", "samples_per_prompt", "max_prompt_tokens", "max_new_tokens",
                  "updates_per_batch", "minibatches"):
            if getattr(self, f) < 1:
                raise ValueError(f"config.rl.{f}={getattr(self, f)}; must be >= 1")
        for f in ("eval_problems", "log_rollouts"):
            if getattr(self, f) < 1:
                raise ValueError(f"config.rl.{f}={getattr(self, f)}; must be >= 1")
        if type(self.off_policy_steps) is not int or self.off_policy_steps not in OFF_POLICY_STEPS:
            raise ValueError(f"config.rl.off_policy_steps={self.off_policy_steps!r}; allowed: 0 (on-policy) or 1 "
                             "(one-step-asynchronous: step t+1's rollouts sampled with the step-t weights)")
        if not self.off_policy_weight_cap >= 1.0:
            raise ValueError(f"config.rl.off_policy_weight_cap={self.off_policy_weight_cap}; must be >= 1 "
                             "(the truncation of the behaviour importance weight)")
        if self.decoupled_loss not in DECOUPLED_LOSS:
            raise ValueError(f"config.rl.decoupled_loss={self.decoupled_loss!r}; allowed: {DECOUPLED_LOSS}")
        if self.decoupled_loss == "off" and self.off_policy_steps:
            raise ValueError("config.rl.decoupled_loss='off' needs config.rl.off_policy_steps=0: stale rollouts "
                             "are weighed against their behaviour policy (allowed here: 'auto', 'on')")
        if self.log_rollouts_every < 0:
            raise ValueError(f"config.rl.log_rollouts_every={self.log_rollouts_every}; must be >= 0 (0 = off)")
        if self.max_problem_tokens < 0:
            raise ValueError(f"config.rl.max_problem_tokens={self.max_problem_tokens}; must be >= 0 "
                             "(0 = max_prompt_tokens)")
        if not isinstance(self.sampling, Sampling):
            object.__setattr__(self, "sampling", Sampling.from_config(self.sampling))
        self.sampling.check_in_graph()
        if self.sampling.max_rows and self.sampling.max_rows < self.samples_per_prompt:
            raise ValueError(f"config.sampling.max_rows={self.sampling.max_rows}; must be 0 or >= "
                             f"config.rl.samples_per_prompt={self.samples_per_prompt} (a prompt's samples "
                             "decode together)")
        if self.advantage not in adv_lib.KINDS:
            raise ValueError(f"config.rl.advantage={self.advantage!r}; allowed: {adv_lib.KINDS}")
        # The allowed values are the tables of `losses` (one place to add a loss or aggregation).
        check_choice("config.rl.loss", self.loss, LOSSES)
        check_choice("config.rl.aggregation", self.aggregation, AGGREGATIONS)
        if self.kl_coef < 0 or self.aux_sft_coef < 0:
            raise ValueError("config.rl.kl_coef and config.rl.aux_sft_coef must be >= 0")
        check_choice("config.rl.aux_sft_normaliser", self.aux_sft_normaliser, AUX_SFT_NORMALISERS)
        if not isinstance(self.cispo_lower_clip, bool):
            raise ValueError(f"config.rl.cispo_lower_clip={self.cispo_lower_clip!r}; allowed: True, False")
        if self.cispo_lower_clip and self.loss != "cispo":
            raise ValueError(f"config.rl.cispo_lower_clip=True needs config.rl.loss='cispo'; got "
                             f"{self.loss!r} (PPO's clip is always two-sided)")
        if not 0.0 <= self.operator_fraction <= 1.0:
            raise ValueError(f"config.rl.operator_fraction={self.operator_fraction}; allowed: [0, 1]")
        if self.gradient_targets not in GRADIENT_TARGETS:
            raise ValueError(f"config.rl.gradient_targets={self.gradient_targets!r}; allowed: {GRADIENT_TARGETS}")
        if self.templates not in P.TEMPLATE_SETS:
            raise ValueError(f"config.rl.templates={self.templates!r}; allowed: {sorted(P.TEMPLATE_SETS)}")
        if self.code_reward not in CODE_REWARDS:
            raise ValueError(f"config.rl.code_reward={self.code_reward!r}; allowed: {CODE_REWARDS}")
        if self.verifier not in VERIFIERS:
            raise ValueError(f"config.rl.verifier={self.verifier!r}; allowed: {VERIFIERS}")
        if self.verifier_baseline not in VERIFIER_BASELINES:
            raise ValueError(f"config.rl.verifier_baseline={self.verifier_baseline!r}; allowed: {VERIFIER_BASELINES}")
        if self.verifier_samples not in VERIFIER_SAMPLES:
            raise ValueError(f"config.rl.verifier_samples={self.verifier_samples!r}; allowed: {VERIFIER_SAMPLES}")
        if self.verifier_samples == "frozen_base" and self.verifier == "none":
            raise ValueError("config.rl.verifier_samples='frozen_base' needs config.rl.verifier "
                             "('pairwise' or 'pointwise'); it has no verifier rows to feed")
        if not 0 <= self.verifier_pointwise_per_prompt <= self.samples_per_prompt:
            raise ValueError(f"config.rl.verifier_pointwise_per_prompt={self.verifier_pointwise_per_prompt}; allowed: "
                             f"0 (every rollout) .. samples_per_prompt={self.samples_per_prompt}")
        if self.operator_fraction > 0:
            if self.operator is None:
                raise ValueError("config.rl.operator_fraction > 0 needs config.rl.operator (a dict of the "
                                 "operator's fields, with `type` a registered operator name; default 'pdr')")
            if not isinstance(self.operator, OperatorSpec):
                try:
                    object.__setattr__(self, "operator", build_spec(self.operator, default_type="pdr"))
                except ValueError as e:
                    raise ValueError(f"config.rl.operator: {e}") from None
            if not self.operator.trainable_rounds(self.gradient_targets):
                raise ValueError(f"config.rl.operator: operator {operator_for(self.operator).name!r} declares no "
                                 "round operator RL can train (OperatorSpec.round_sizes / trainable_rounds)")
        if self.eval_operators is not None:
            object.__setattr__(self, "eval_operators", eval_entries(self.eval_operators))

    def eval_specs(self) -> tuple:
        """((metric name, operator spec), ...) of the held-out eval (`rl_eval`): `eval_operators`,
        or by default Long-CoT with the rollout budget and, for operator RL, the RL operator
        itself (PDR §4.2 compares the two)."""
        if self.eval_operators is not None:
            return self.eval_operators
        out = (("long_cot", build_spec({"type": "long_cot", "max_new_tokens": self.max_new_tokens})),)
        if self.operator_fraction > 0:
            out += ((operator_for(self.operator).name, self.operator),)
        return eval_entries(out)

    @property
    def decoupled(self) -> bool:
        """Whether each batch carries `prox_logp`, the trainer's log-probabilities of the rollouts
        under the step's params (one forward pass), and the loss weighs the sampler's record as
        the behaviour policy (`losses.policy_loss`). "auto": with stale rollouts, and with a
        float8 decode cache, whose sampler log-probabilities drift from the trainer's
        (`sampling.Sampling.kv_cache_dtype`; the FP8 rollout stacks correct the same drift with
        token-level truncated importance weights, C = 2: NeMo-RL PR 1212, verl PR 4435)."""
        if self.decoupled_loss != "auto":
            return self.decoupled_loss == "on"
        return bool(self.off_policy_steps) or self.sampling.kv_cache_dtype.startswith("float8")

    @property
    def problem_tokens(self) -> int:
        """Width of a problem quoted inside operator and verifier prompts."""
        return self.max_problem_tokens or self.max_prompt_tokens

    def call_sampling(self, stop_ids) -> Sampling:
        """The operator context's sampling for operator-RL rounds: `sampling` with the tokenizer's stop ids."""
        return dataclasses.replace(self.sampling, stop_ids=tuple(stop_ids))

    def sampler_config(self, max_new: int, num_samples: int, stop_ids) -> SamplingConfig:
        """A standard rollout's or verifier call's sampler settings (`sampling`, the call's budget)."""
        return SamplingConfig.of(self.call_sampling(stop_ids), max_new, num_samples=num_samples)

    @classmethod
    def from_config(cls, config) -> "RLConfig":
        """From `config.rl` and `config.sampling`; a key that moved (`config_schema.MOVED`) raises,
        naming its new place."""
        check_moved(config, [k for k in MOVED if k.startswith("rl.")])
        rl = config.rl.to_dict() if hasattr(config.rl, "to_dict") else dict(config.rl)
        if "sampling" in rl:
            raise ValueError("config.rl.sampling: the sampling config is top-level, config.sampling "
                             "(shared by eval and RL)")
        rl["sampling"] = Sampling.from_config(config.get("sampling") if hasattr(config, "get") else None)
        if isinstance(rl.get("operator"), dict) and not rl["operator"]:
            rl["operator"] = None
        unknown = set(rl) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"config.rl: unknown fields {sorted(unknown)}; allowed: {sorted(cls.__dataclass_fields__)}")
        return cls(**rl)



def eval_entries(entries) -> tuple:
    """`config.rl.eval_operators` as ((name, spec), ...): each entry is an eval config's operator
    entry (a dict with `type` and the spec's fields) with an optional `name`
    (default: the registered operator name), a spec, or a (name, spec) pair. Names must differ."""
    if isinstance(entries, (str, dict)) or not isinstance(entries, (tuple, list)) or not entries:
        raise ValueError(f"config.rl.eval_operators={entries!r}; must be None (Long-CoT, plus the RL operator "
                         "for operator RL) or a non-empty tuple of operator entries such as "
                         "({'type': 'long_cot', 'max_new_tokens': 64},)")
    out = []
    for i, entry in enumerate(entries):
        if hasattr(entry, "to_dict"):
            entry = entry.to_dict()
        if isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[1], OperatorSpec):
            name, spec = entry
        elif isinstance(entry, OperatorSpec):
            name, spec = operator_for(entry).name, entry
        elif isinstance(entry, dict):
            entry = dict(entry)
            name = entry.pop("name", None)
            try:
                spec = build_spec(entry)
            except (ValueError, TypeError) as e:
                raise ValueError(f"config.rl.eval_operators[{i}]: {e}") from None
            name = name or operator_for(spec).name
        else:
            raise ValueError(f"config.rl.eval_operators[{i}]={entry!r}; must be a dict of an operator's fields "
                             "with `type` (and an optional `name`)")
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"config.rl.eval_operators[{i}]: name={name!r}; must be a non-empty string without '/'")
        out.append((name, spec))
    names = [n for n, _ in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"config.rl.eval_operators: entries share the name(s) {twice}; give each a distinct "
                         "`name` (its metrics are eval/<name>/...)")
    return tuple(out)
