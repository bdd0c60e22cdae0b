"""Shared training loop of the examples (``--dtype float32|fixed``, ``--backend numpy|cupy|auto``, progress
bar or lines)."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import circuitgrad as cg
from circuitgrad import datasets, nn
from circuitgrad.progress import progress


def parser(description: str, epochs: int, batch: int, lr: float, hidden: list[int],
           momentum: float = 0.9) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dtype", choices=["float32", "float64", "fixed"], default="float32",
                   help="float training (NumPy) or exact fixed-point training (fixed-point interpreter)")
    p.add_argument("--width", type=int, default=32, help="fixed-point width in bits (with --dtype fixed)")
    p.add_argument("--frac", type=int, default=16, help="fixed-point fractional bits (with --dtype fixed)")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--momentum", type=float, default=momentum, help="0 for plain SGD")
    p.add_argument("--hidden", type=int, nargs="*", default=hidden, help="hidden layer widths")
    add_backend(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show-source", action="store_true", help="print the generated step code")
    p.add_argument("--quiet", action="store_true",
                   help="no progress (a bar on a terminal, else a line every tenth of the steps)")
    return p


BACKENDS = ("numpy", "cupy", "auto")


def add_backend(p: argparse.ArgumentParser, default: str = "numpy") -> None:
    """``--backend numpy|cupy|auto``: every example that trains takes it (resolve it with :func:`backend`)."""
    p.add_argument("--backend", choices=BACKENDS, default=default,
                   help="where float training runs: numpy (CPU), cupy (fused CUDA kernels; needs CuPy and a "
                        "CUDA device) or auto (cupy when a GPU is usable, else numpy)")


def backend(p: argparse.ArgumentParser, args) -> str:
    """The backend ``args.backend`` asks for, made concrete (``"numpy"`` or ``"cupy"``) and stored back in
    ``args.backend``. ``auto`` picks cupy only when :func:`circuitgrad.backends.gpu.available` says a device is
    usable. ``--backend cupy`` without CuPy or a device ends the script with one line on stderr and status 1
    (the command line is valid; this machine cannot run it); with ``--dtype fixed`` it is a usage error (2)."""
    want = args.backend
    if want == "cupy" and getattr(args, "dtype", "float32") == "fixed":
        p.error("--backend cupy computes in float32/float64; --dtype fixed trains on the NumPy interpreter "
                "(use --backend numpy)")
    if want == "numpy" or getattr(args, "dtype", "float32") == "fixed":
        args.backend = "numpy"
        return "numpy"
    from circuitgrad.backends import gpu
    ok, why = gpu.available()
    if not ok and want == "cupy":
        sys.exit(cupy_unavailable(p.prog, why))
    args.backend = "cupy" if ok else "numpy"
    return args.backend


def cupy_unavailable(prog: str, why: str) -> str:
    """The one-line error of ``--backend cupy`` on a machine without CuPy or a CUDA device."""
    return f"{prog}: error: --backend cupy needs CuPy and a CUDA device: {why}; use --backend numpy or auto"


def check_args(args, data: datasets.Dataset) -> str | None:
    """What is wrong with the command line for this data set (for ``parser.error``), or None."""
    n = len(data.x_train)
    if args.epochs < 0:
        return f"--epochs must be 0 or more, got {args.epochs}"
    if args.batch < 1:
        return f"--batch must be 1 or more, got {args.batch}"
    if args.batch > n:
        return f"--batch {args.batch} is larger than the {n} training rows of {data.name}: use --batch {n} or less"
    if any(h < 1 for h in args.hidden):
        return f"--hidden widths must be 1 or more, got {args.hidden}"
    return None


def model_for(data: datasets.Dataset, args) -> cg.Diagram:
    """The MLP of the command line, typed in the dtype it trains in (so that it prints as it runs)."""
    return nn.mlp(args.batch, [data.features, *args.hidden, data.classes], activation=nn.relu,
                  dtype=options(args)[0])


def options(args) -> tuple[cg.Dtype, nn.Optimizer]:
    """The dtype and optimizer of the command line (``ValueError``/``TypeError`` naming a bad value)."""
    if args.dtype == "fixed":
        dtype = cg.fixed(args.width, args.frac)
    else:
        dtype = {"float32": cg.float32, "float64": cg.float64}[args.dtype]
    opt = nn.momentum(args.lr, args.momentum) if args.momentum else nn.sgd(args.lr)
    return dtype, opt


def compile_for(model: cg.Diagram, args) -> cg.CompiledModel:
    dtype, opt = options(args)
    return cg.compile_model(model, loss=nn.softmax_cross_entropy, optimizer=opt, dtype=dtype,
                            backend=args.backend if args.dtype != "fixed" else "numpy")      # see backend()


def train(data: datasets.Dataset, args, step: cg.CompiledModel) -> float:
    """Train ``step`` on ``data`` for ``args.epochs``; prints and returns the test accuracy."""
    if args.show_source:
        print(step.source)
    print(f"{data.name}: {step.model}\ncompiled for {step.dtype} on {step.backend} in "
          f"{step.compile_seconds * 1e3:.1f} ms; {len(data.x_train)} train / {len(data.x_test)} test rows")
    params = step.init_params(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    per_epoch = len(data.x_train) // args.batch
    t0 = time.perf_counter()
    with progress(args.epochs * per_epoch, f"train {data.name} [{step.dtype}]", disable=args.quiet) as bar:
        for epoch in range(args.epochs):
            for x, y in datasets.batches(data.x_train, data.y_train, args.batch, rng):
                params = step.step(params, x, y)
                bar.update()
            bar.set_postfix(loss=f"{step.loss(params, x, y):.4f}")
    acc = float((step.to_host(step.predict(params, data.x_test)).argmax(1) == data.y_test).mean())
    print(f"trained {args.epochs} epochs in {time.perf_counter() - t0:.1f} s")
    print(f"accuracy={acc:.4f}")
    return acc


def mlp_spec(name: str, batch: int, hidden, lr: float, momentum: float = 0.9,
             dtype: cg.Dtype = cg.float32) -> cg.ModelSpec:
    """The model file convention (``circuitgrad/modelfile.py``) for an MLP example: the ReLU MLP, loss,
    optimizer and dtype this script trains, and shuffled batches of the training set."""
    data = datasets.load(name)
    model = nn.mlp(batch, [data.features, *hidden, data.classes], activation=nn.relu, dtype=dtype)
    opt = nn.momentum(lr, momentum) if momentum else nn.sgd(lr)
    return cg.ModelSpec(model, nn.softmax_cross_entropy, opt, dtype,
                        lambda seed: datasets.batches(data.x_train, data.y_train, batch, np.random.default_rng(seed)),
                        dataset=lambda: (data.x_train, data.y_train))


def mlp_model(name: str, defaults: dict):
    """The ``model`` of an MLP example's model file: :func:`mlp_spec` of data set ``name``, its defaults the
    script's (``circuitgrad zk prove``, ``fpga synth`` read them from the signature)."""
    def model(batch: int = defaults["batch"], hidden: tuple = tuple(defaults["hidden"]), lr: float = defaults["lr"],
              momentum: float = defaults.get("momentum", 0.9), dtype: cg.Dtype = cg.float32) -> cg.ModelSpec:
        """The model file convention (``circuitgrad zk prove``, ``fpga synth``): what this script trains."""
        return mlp_spec(name, batch, hidden, lr, momentum, dtype)
    return model


def main(name: str, defaults: dict, description: str) -> float:
    """Parse the command line, refuse bad values with a one-line usage error, train on data set ``name``."""
    p = parser(description, **defaults)
    args = p.parse_args()
    data = datasets.load(name, seed=args.seed)
    problem = check_args(args, data)
    if problem is not None:
        p.error(problem)
    backend(p, args)
    try:        # bad --lr, --momentum, --width/--frac (or a learning rate they cannot hold), --backend
        step = compile_for(model_for(data, args), args)
    except (ValueError, TypeError, RuntimeError) as e:
        p.error(str(e))
    return train(data, args, step)
