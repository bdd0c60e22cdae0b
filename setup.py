"""Package discovery; everything else is in pyproject.toml.

Three source roots, each mapped to a package name: ``circuitgrad/`` is
``circuitgrad``, ``backends/`` is ``circuitgrad.backends`` (so no
top-level ``backends`` package lands in site-packages) and ``examples/`` is
``circuitgrad.examples`` (the example model files, which the command line
names by their short name: ``circuitgrad cost tinygpt``). Every package under
a root is found, and every module of a package ships, so a new subpackage or
example ships without editing a list.
"""
from setuptools import find_packages, setup

ROOTS = {"circuitgrad": "circuitgrad", "circuitgrad.backends": "backends", "circuitgrad.examples": "examples"}

setup(
    package_dir=ROOTS,
    packages=[f"{name}.{sub}" if sub else name
              for name, folder in ROOTS.items()
              for sub in ["", *find_packages(folder)]],
)
