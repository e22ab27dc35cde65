"""SFT of a tiny decoder with SmolLM2's real tokenizer on GSM8K's worked solutions: the first real
run of a fresh clone (data download, train, eval of the checkpoint, export, serve) in minutes on CPU.

The model is SmolLM2-135M's architecture shrunk to 2 layers of width 64 and randomly initialised
(`arg` "pretrained" starts from the embedded SmolLM2-135M-Instruct weights at full size instead);
its tokenizer and chat template are SmolLM2's, so `prd-jax export` writes a complete HF directory.
Rows are GSM8K train problems prompted with the task's `solve` template, the target the worked
solution (`train.setup.task_sft_rows`); no held-out loss (GSM8K has no validation split, and
its 1319 test rows would cost more than training here: set `--config.data.eval_split=test`).

Command to run (after `prd-jax data get gsm8k`):
    prd-jax train --config configs/sft/tiny_gsm8k.py --workdir /tmp/sft_gsm8k
    prd-jax eval --config configs/eval/smollm2_gsm8k.py --workdir /tmp/eval_sft_gsm8k \
        --config.checkpoint=/tmp/sft_gsm8k --config.num_problems=2

Expected (ours; the papers train nothing this small): 40 steps of 8 rows in about a minute on 2
busy CPU cores (63 s, 2026-12-04); the training loss falls from 11.3 at step 1 (ln 49152 = 10.8 is
a uniform guess) to about 5.0 by step 36. The model solves no GSM8K problem: the point is that
every stage of the pipeline runs on real data.
"""

import ml_collections


def get_config(arg=None):
    if arg not in (None, "pretrained"):
        raise ValueError(f"configs/sft/tiny_gsm8k.py: arg={arg!r}; allowed: none or 'pretrained'")
    pretrained = arg == "pretrained"
    c = ml_collections.ConfigDict()
    c.stage = "sft"
    c.seed = 0
    c.mesh = ""
    c.tokenizer = "model"  # SmolLM2's tokenizer and chat template
    c.model = ml_collections.ConfigDict(dict(
        name="smollm2-135m", path="", init="pretrained" if pretrained else "random", init_workdir="",
        overrides={} if pretrained else dict(hidden=64, intermediate=128, num_layers=2, num_heads=4,
                                             num_kv_heads=2, head_dim=16, max_position=2048)))
    c.task = "gsm8k"  # rows: problem + worked solution (split "train"); no held-out split (eval_split="")
    c.split = "train"
    c.data_dir = ""  # default: $PRD_DATA_DIR, else the user data dir
    c.data = ml_collections.ConfigDict(dict(num_train=320, seq_len=384, mode="pad", eval_split=""))
    c.batch_size = 8
    c.grad_accum_steps = 1
    c.optim = ml_collections.ConfigDict(dict(
        learning_rate=2e-5 if pretrained else 3e-3, warmup_steps=4, decay_steps=40, schedule="cosine",
        end_lr_fraction=0.1, weight_decay=0.01, grad_clip_norm=1.0))
    c.steps = 40
    c.checkpoint_every = 20
    c.keep_checkpoints = 2
    c.eval_every = 20
    c.max_nonfinite_steps = 5
    return c
