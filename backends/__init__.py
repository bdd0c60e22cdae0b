"""Compilation targets, importable as ``circuitgrad.backends``.

* :mod:`circuitgrad.backends.gpu`  — fused CUDA kernels and cuBLAS calls through CuPy
* :mod:`circuitgrad.backends.fpga` — Amaranth HDL: the microcoded sequencer and unrolled designs
* :mod:`circuitgrad.backends.zk`   — arithmetic circuits (R1CS with lookups and contractions), the native
  Ligero prover and snarkjs

Each backend consumes the SSA program of :mod:`circuitgrad.schedule` and
owns one rule table keyed by primitive class (``GPU_RULES``, ``FPGA_RULES``, ``ZK_RULES``); the conformance
test lists every primitive a backend lacks.
"""
__all__ = ["gpu", "fpga", "zk"]
