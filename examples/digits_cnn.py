"""A small CNN on scikit-learn's 8x8 digits; prints ``accuracy=<test accuracy>``.

Each image ``[1, 8, 8]`` goes through a 3x3 convolution to 16 channels (zero padding 1), ReLU,
2x2 max pooling, a flatten to 256 features and a linear layer to the 10 classes::

    conv2d(1→16, 3x3) ── relu ── max_pool2d(2) ── flatten ── dense(256→10)

Momentum SGD, softmax cross-entropy, in float or in exact fixed point:

    python examples/digits_cnn.py                      # float32 (NumPy)
    python examples/digits_cnn.py --dtype fixed        # fixed(32, 16), the fixed-point interpreter
    python examples/digits_cnn.py --backend cupy       # float32 on a GPU (fused CUDA kernels)
"""
from __future__ import annotations

import os
import sys

import numpy as np

import circuitgrad as cg
from circuitgrad import datasets, nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _train import backend, check_args, compile_for, options, parser, train  # noqa: E402

DATASET = "digits"


def cnn(B: int, channels: int = 16, hidden: list[int] | tuple[int, ...] = (), dtype=cg.float32) -> cg.Diagram:
    """``[B, 64]`` pixels → ``[B, 10]`` logits (``hidden``: dense ReLU layers before the classifier)."""
    c = channels
    image = cg.trace(lambda x: x.reshape(B, 1, 8, 8), [cg.NdArrayType((B, 64), dtype)], name=f"image({B},1,8,8)")
    layers = [image, nn.conv2d(B, 1, 8, 8, c, kernel=3, padding=1, dtype=dtype), nn.relu(B, c, 8, 8, dtype=dtype),
              nn.max_pool2d(B, c, 8, 8, 2, dtype=dtype), nn.flatten(B, c, 4, 4, dtype=dtype),
              nn.mlp(B, [c * 16, *hidden, 10], dtype=dtype)]
    return cg.sequential(layers, name=f"cnn(conv3x3x{c},maxpool2,{'-'.join(map(str, [c * 16, *hidden, 10]))})")


def model(batch: int = 32, channels: int = 16, hidden: list[int] | tuple[int, ...] = (), lr: float = 0.05,
          momentum: float = 0.9, dtype: cg.Dtype = cg.float32) -> cg.ModelSpec:
    """The model file convention (``circuitgrad zk prove``, ``fpga synth``): the CNN, loss, optimizer and
    data this script trains (its defaults: batch 32, 16 channels, momentum SGD 0.05/0.9)."""
    data = datasets.load(DATASET)
    opt = nn.momentum(lr, momentum) if momentum else nn.sgd(lr)
    return cg.ModelSpec(cnn(batch, channels, hidden, dtype), nn.softmax_cross_entropy, opt, dtype,
                        lambda seed: datasets.batches(data.x_train, data.y_train, batch, np.random.default_rng(seed)))


def main() -> float:
    p = parser(__doc__.splitlines()[0], epochs=20, batch=32, lr=0.05, hidden=[])
    p.add_argument("--channels", type=int, default=16, help="convolution output channels")
    args = p.parse_args()
    data = datasets.load(DATASET, seed=args.seed)
    problem = check_args(args, data) or (None if args.channels >= 1 else
                                         f"--channels must be 1 or more, got {args.channels}")
    if problem is not None:
        p.error(problem)
    backend(p, args)
    try:
        step = compile_for(cnn(args.batch, args.channels, args.hidden, options(args)[0]), args)
    except (ValueError, TypeError, RuntimeError) as e:
        p.error(str(e))
    return train(data, args, step)


if __name__ == "__main__":
    main()
