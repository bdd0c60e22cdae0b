"""Train a 4-16-3 MLP on iris; prints ``accuracy=<test accuracy>``.

    python examples/iris.py                    # float32, NumPy backend
    python examples/iris.py --dtype fixed      # exact fixed(32, 16) training
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _train import main  # noqa: E402

DATASET = "iris"
DEFAULTS = dict(epochs=60, batch=8, lr=0.05, hidden=[16])

if __name__ == "__main__":
    main(DATASET, DEFAULTS, __doc__.splitlines()[0])
