"""Train a 4-16-3 MLP on iris; prints ``accuracy=<test accuracy>``.

    python examples/iris.py                    # float32, NumPy backend
    python examples/iris.py --dtype fixed      # exact fixed(32, 16) training
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import circuitgrad as cg  # noqa: E402
from _train import main, mlp_spec  # noqa: E402

DATASET = "iris"
DEFAULTS = dict(epochs=60, batch=8, lr=0.05, hidden=[16])


def model(batch=DEFAULTS["batch"], hidden=tuple(DEFAULTS["hidden"]), lr=DEFAULTS["lr"], momentum=0.9, dtype=cg.float32) -> cg.ModelSpec:
    """The model file convention (``circuitgrad zk prove``, ``fpga synth``): what this script trains."""
    return mlp_spec(DATASET, batch, hidden, lr, momentum, dtype)


if __name__ == "__main__":
    main(DATASET, DEFAULTS, __doc__.splitlines()[0])
