"""Ahead-of-time compile-and-fit: will a config's programs run on a target pod?

`prd-jax compile` (`aot.report`) lowers every program a config runs (`aot.programs`) with
its real shapes and mesh, for a TPU topology (through libtpu, on any host) or for N
simulated devices (GPU targets), and sets XLA's per-device memory and an analytic model
(`aot.estimate`) against the chip table (`aot.chips`).
"""
