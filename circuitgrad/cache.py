"""The per-user cache (``~/.cache/circuitgrad``, or ``$CIRCUITGRAD_CACHE``): tools and calibrations.

Cached files are untrusted input: the calibrations (:mod:`circuitgrad.costmodel.calibration`) measure again
whatever does not parse and validate.
"""
from __future__ import annotations

import os

__all__ = ["cache_dir"]


def cache_dir(*parts: str) -> str:
    """The cache directory (or a subdirectory of it), created if needed."""
    root = os.environ.get("CIRCUITGRAD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "circuitgrad")
    path = os.path.join(root, *parts)
    os.makedirs(path, exist_ok=True)
    return path
