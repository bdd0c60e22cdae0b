"""Compilation targets, importable as ``circuitgrad.backends``.

* :mod:`circuitgrad.backends.gpu`  — CuPy step functions (planned)
* :mod:`circuitgrad.backends.fpga` — Amaranth HDL designs (planned)
* :mod:`circuitgrad.backends.zk`   — arithmetic circuits / R1CS (planned)

Each backend consumes the SSA program of :mod:`circuitgrad.schedule` and
owns one rule table keyed by primitive class (``RULES``); the conformance
test lists every primitive a backend lacks.
"""
__all__ = ["gpu", "fpga", "zk"]
