"""`prd-jax serve`: OpenAI-compatible serving of our checkpoints (`app`, `engine`, `protocol`)."""
