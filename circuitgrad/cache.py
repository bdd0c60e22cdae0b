"""The per-user cache (``~/.cache/circuitgrad``, or ``$CIRCUITGRAD_CACHE``): tools and calibrations.

Cached files are untrusted input: :func:`cached` re-measures whatever does not parse and validate.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, TypeVar

__all__ = ["cache_dir", "cached"]

T = TypeVar("T")


def cache_dir(*parts: str) -> str:
    """The cache directory (or a subdirectory of it), created if needed."""
    root = os.environ.get("CIRCUITGRAD_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "circuitgrad")
    path = os.path.join(root, *parts)
    os.makedirs(path, exist_ok=True)
    return path


def cached(name: str, key: dict[str, Any], parse: Callable[[dict], T | None], measure: Callable[[], T],
           dump: Callable[[T], dict], refresh: bool = False) -> T:
    """The value cached in the JSON file ``name`` if its ``key`` fields match and ``parse`` accepts it
    (``parse`` returns None, or raises ``ValueError``/``KeyError``/``TypeError``, for a malformed one);
    else ``measure()``, written back with ``key``."""
    path = os.path.join(cache_dir(), name)
    if not refresh:
        try:
            with open(path) as fh:
                d = json.load(fh)
            if isinstance(d, dict) and all(d.get(k) == v for k, v in key.items()):
                value = parse(d)
                if value is not None:
                    return value
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass                          # missing, damaged or foreign: measured again
    value = measure()
    with open(path, "w") as fh:
        json.dump({**dump(value), **key}, fh)
    return value
