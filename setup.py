"""Package discovery; everything else is in pyproject.toml.

Two source roots, each mapped to a package name: ``circuitgrad/`` is
``circuitgrad`` and ``backends/`` is ``circuitgrad.backends`` (so no
top-level ``backends`` package lands in site-packages). Every package under
either root is found, so a new subpackage ships without editing a list.
"""
from setuptools import find_packages, setup

ROOTS = {"circuitgrad": "circuitgrad", "circuitgrad.backends": "backends"}

setup(
    package_dir=ROOTS,
    packages=[f"{name}.{sub}" if sub else name
              for name, folder in ROOTS.items()
              for sub in ["", *find_packages(folder)]],
)
