"""Train a 4-16-3 MLP on iris; prints ``accuracy=<test accuracy>``.

    python examples/iris.py                    # float32, NumPy backend
    python examples/iris.py --dtype fixed      # exact fixed(32, 16) training
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _train import main, mlp_model  # noqa: E402

DATASET = "iris"
DEFAULTS = dict(epochs=60, batch=8, lr=0.05, hidden=[16])
model = mlp_model(DATASET, DEFAULTS)     # the model file convention: what this script trains

if __name__ == "__main__":
    main(DATASET, DEFAULTS, __doc__.splitlines()[0])
