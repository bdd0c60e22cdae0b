"""Minimal stand-in for ``torch`` so catgrad 0.2.2 imports without PyTorch.

catgrad.target.python.array_backend imports its Torch backend module at import
time, which does ``import torch`` and uses ``torch.Tensor`` in annotations.
The benchmark only uses the Numpy backend, so nothing here is ever called.
Only put on sys.path by catgrad_compile.py when a real ``import torch`` fails.
"""
__version__ = "0.0.0+stub"


class Tensor:  # referenced only in type annotations
    pass


int32 = float32 = bool = None  # referenced only inside Torch.dtype()
