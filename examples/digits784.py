"""Train a 784-32-10 MLP on the digits upsampled to 28 × 28 (MNIST's shape); prints ``accuracy=<test accuracy>``.

    python examples/digits784.py                              # float32, NumPy backend
    python examples/digits784.py --dtype fixed --width 16 --frac 8   # the FPGA's fixed(16, 8), exactly
    circuitgrad fpga synth examples/digits784.py --target ecp5-85k --macs 8   # its training step on an ECP5

Plain SGD at batch 8 by default: momentum would add a 784 × 32 state, which with eight lanes no longer fits
the ECP5-85k's block RAM.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _train import main, mlp_model  # noqa: E402

DATASET = "digits28"
DEFAULTS = dict(epochs=10, batch=8, lr=0.05, hidden=[32], momentum=0.0)
model = mlp_model(DATASET, DEFAULTS)     # the model file convention: what this script trains

if __name__ == "__main__":
    main(DATASET, DEFAULTS, __doc__.splitlines()[0])
