"""Train a 64-64-10 MLP on the 8×8 digits; prints ``accuracy=<test accuracy>``.

    python examples/digits.py                  # float32, NumPy backend
    python examples/digits.py --dtype fixed    # exact fixed(32, 16) training
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _train import main, mlp_model  # noqa: E402

DATASET = "digits"
DEFAULTS = dict(epochs=20, batch=32, lr=0.05, hidden=[64])
model = mlp_model(DATASET, DEFAULTS)     # the model file convention: what this script trains

if __name__ == "__main__":
    main(DATASET, DEFAULTS, __doc__.splitlines()[0])
