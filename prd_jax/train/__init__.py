"""Training: RL advantages, token-level losses, optimizer and schedule (import submodules directly)."""
