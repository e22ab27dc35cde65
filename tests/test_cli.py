"""`prd-jax generate` on the embedded SmolLM2, and the TensorFlow-free core imports."""

import json
import subprocess
import sys

import numpy as np
import pytest

from prd_jax import cli


def test_generate_json_record(capsys):
    cli.main(["generate", "--model", "smollm2-135m", "--prompt", "What is 2+2?", "--chat",
              "--max-new-tokens", "6", "--temperature", "1.0", "--top-k", "40", "--num-samples", "3",
              "--seed", "1", "--json"])
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    from prd_jax.model.tokenizer import Tokenizer
    from prd_jax.model.loader import smollm2_gguf_path

    tok = Tokenizer.from_gguf(smollm2_gguf_path())
    assert record["prompt_ids"] == tok.encode_chat([{"role": "user", "content": "What is 2+2?"}])
    samples = [record] + record["samples"]
    assert len(samples) == 3
    for s in samples:
        assert 1 <= len(s["completion_ids"]) <= 6
        assert len(s["logprobs"]) == len(s["completion_ids"])
        assert all(lp <= 0.0 for lp in s["logprobs"])
        assert s["text"] == tok.decode(s["completion_ids"])
    # Same seed, same samples: there is no hidden RNG state.
    cli.main(["generate", "--prompt", "What is 2+2?", "--chat", "--max-new-tokens", "6",
              "--temperature", "1.0", "--top-k", "40", "--num-samples", "3", "--seed", "1", "--json"])
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["completion_ids"] == record["completion_ids"]
    np.testing.assert_allclose(again["logprobs"], record["logprobs"], atol=1e-5)


def test_sampling_without_seed_is_refused():
    with pytest.raises(SystemExit, match="--seed is required"):
        cli.main(["generate", "--prompt", "hi", "--temperature", "0.7"])


def test_core_imports_do_not_load_tensorflow():
    code = ("import sys; import prd_jax.model, prd_jax.sampling, prd_jax.mesh, prd_jax.cli; "
            "bad = [m for m in ('tensorflow', 'seqio', 'tensorflow_datasets', 'torch') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
