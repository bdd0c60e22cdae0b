"""Small real data sets that ship inside scikit-learn (no download): iris, digits, and digits upsampled to 28 × 28.

:func:`load` standardises the features with statistics of the training split
only and returns a stratified train/test split; :func:`batches` yields
shuffled full batches (the compiled step has a fixed batch size).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .extras import MissingExtra

__all__ = ["Dataset", "load", "batches"]


@dataclass
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int

    @property
    def features(self) -> int:
        return self.x_train.shape[1]


def _digits28(return_X_y: bool = True):
    """The 8 × 8 digits upsampled to 28 × 28 (bilinear), flattened to 784 features: MNIST's shape from data
    that ships with scikit-learn."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    return zoom(x.reshape(-1, 8, 8), (1, 3.5, 3.5), order=1).reshape(len(x), 784), y


def load(name: str, test_fraction: float = 0.25, seed: int = 0) -> Dataset:
    """``"iris"`` (150 × 4, 3 classes), ``"digits"`` (1797 × 64, 10 classes) or ``"digits28"`` (the digits
    upsampled to 28 × 28: 1797 × 784, 10 classes)."""
    try:
        from sklearn import datasets as skd
        from sklearn.model_selection import train_test_split
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise MissingExtra("datasets.load (the example data sets)", "scikit-learn", "examples") from e
    loaders = {"iris": skd.load_iris, "digits": skd.load_digits, "digits28": _digits28}
    if name not in loaders:
        raise ValueError(f"unknown data set {name!r}; available: {sorted(loaders)}")
    x, y = loaders[name](return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    mu, sd = xtr.mean(0), xtr.std(0)
    sd[sd == 0] = 1.0
    if name == "digits28":          # interpolated border pixels vary little: one scale for all keeps them small
        sd[:] = xtr.std()
    return Dataset(name, (xtr - mu) / sd, ytr, (xte - mu) / sd, yte, int(y.max()) + 1)


def batches(x: np.ndarray, y: np.ndarray, batch: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Shuffled full batches of ``batch`` rows (the remainder of each epoch is dropped).

    ``ValueError`` at once (not when iterating) unless ``1 <= batch <= len(x)``:
    a larger batch would silently yield nothing.
    """
    if not 1 <= batch <= len(x):
        raise ValueError(f"batches: batch must be in 1..{len(x)} (the number of rows), got {batch}")
    idx = rng.permutation(len(x))
    return ((x[j], y[j]) for j in (idx[i:i + batch] for i in range(0, len(x) - batch + 1, batch)))
