"""tinygpt trained in the proof's fixed point against float32: the validation-loss curve.

    python bench/fixed_point_tinygpt.py [--steps 300] [--every 50] [--formats 20,10] [--eval-batches 4]
                                        [--lr 0.1]

The step the zero-knowledge prover proves (``circuitgrad zk prove examples/tinygpt.py --width 20 --frac 10``:
momentum SGD at rate ``--lr`` (the example's 0.1), momentum 0.9, in exact fixed point in the reference interpreter, every range
check on) trained from the same initial parameters on the same batches as float32 with the same
optimizer, and as float32 with the example's own AdamW and cosine schedule. Every ``--every`` steps each
run's validation loss is measured the same way: the model's logits on the first ``--eval-batches`` of
the example's validation batches (dequantized in fixed point), then the cross entropy in float64. The
table pastes into docs/FIXED_POINT.md. A fixed-point run that overflows its format (``FixedPointOverflow``:
the interpreter checks every result) stops there; the table gives its curve up to that step and the
message names the instruction.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from _util import table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad.fixedpoint import FixedPointOverflow  # noqa: E402
import tinygpt as T  # noqa: E402


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> float:
    """Mean cross entropy (nats/char) of float64 ``logits [n, S, V]`` at targets ``y [n, S]``."""
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return float(-np.take_along_axis(logp, y[..., None], axis=-1).mean())


def evaluate(step: cg.CompiledModel, params: dict, val: np.ndarray, batches: int) -> float:
    seq, batch = T.DEFAULTS["seq"], T.DEFAULTS["batch"]
    starts = T.val_starts(len(val), seq, batch)[:batches].reshape(-1)
    x, y = T.windows(val, starts, seq)
    return cross_entropy(np.asarray(step.predict(params, x)), y)


def curve(name: str, dtype: cg.Dtype, adamw: bool, steps: int, every: int, batches: int, lr: float = 0.1,
          seed: int = 0) -> tuple[dict[int, float], float, str]:
    """``({step: validation loss}, seconds a step, why it stopped early or "")`` of one run."""
    D = T.DEFAULTS
    train, val = T.split(T.corpus(D["chars"]))
    spec = T.model(dtype=dtype, fixed_lr=lr)
    if not adamw and not isinstance(dtype, cg.Fixed):
        spec = cg.ModelSpec(spec.model, spec.loss, cg.nn.momentum(lr, 0.9), dtype, spec.data)
    step = spec.compile(backend="numpy")
    params = step.init_params(seed=seed)
    args = argparse.Namespace(steps=steps, lr=D["lr"])
    try:
        out, spent = {0: evaluate(step, params, val, batches)}, 0.0
    except FixedPointOverflow as e:                 # the initial parameters' predict already leaves the format
        why = f"step 0 (the initial predict) overflowed: {str(e).split(';')[0]}"
        print(f"fixed_point_tinygpt: {name}: {why}", file=sys.stderr, flush=True)
        return {}, 0.0, why
    done = 0
    for k, starts in enumerate(T.batch_starts(len(train), D["seq"], D["batch"], steps, seed)):
        t0 = time.perf_counter()
        try:
            params = step.step(T.with_rate(params, k, args), *T.windows(train, starts, D["seq"]))
            done = k + 1
            if done % every == 0 or done == steps or done % max(1, every // 5) == 0 and done < every:
                out[done] = evaluate(step, params, val, batches)
        except FixedPointOverflow as e:
            why = f"step {k + 1} overflowed: {str(e).split(';')[0]}"
            print(f"fixed_point_tinygpt: {name}: {why}", file=sys.stderr, flush=True)
            return out, spent / max(1, done), why
        spent += time.perf_counter() - t0
        if done in out:
            print(f"fixed_point_tinygpt: {name}: step {done}: val_loss {out[done]:.4f} "
                  f"({spent / done:.2f} s a step)", file=sys.stderr, flush=True)
    return out, spent / steps, ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--formats", nargs="*", default=["20,10"], help="fixed formats WIDTH,FRAC")
    ap.add_argument("--eval-batches", type=int, default=4, help="validation batches of 16 windows")
    ap.add_argument("--lr", type=float, default=0.1, help="momentum SGD's rate (fixed point and float32 momentum)")
    a = ap.parse_args(argv)
    runs = [("float32 AdamW", cg.float32, True), ("float32 momentum", cg.float32, False)]
    runs += [(f"fixed({f}) momentum", cg.fixed(*map(int, f.split(","))), False) for f in a.formats]
    curves, rates, stops = {}, {}, {}
    for name, dt, adamw in runs:
        curves[name], rates[name], stops[name] = curve(name, dt, adamw, a.steps, a.every, a.eval_batches, a.lr)
    names = [n for n, _, _ in runs]
    ref = "float32 momentum"
    steps = sorted(set().union(*(curves[n] for n in names)))
    cell = lambda n, k: f"{curves[n][k]:.4f}" if k in curves[n] else "—"             # noqa: E731
    ratio = lambda n, k: f"{curves[n][k] / curves[ref][k]:.4f}" if k in curves[n] and k in curves[ref] else "—"  # noqa: E731
    rows = [[str(k)] + [cell(n, k) for n in names] + [ratio(n, k) for n in names[2:]] for k in steps]
    print(f"tinygpt (d=128, 4 heads, 2 layers, B=16, S=64), validation loss on {a.eval_batches * 16} windows "
          f"of 64 characters; momentum SGD {a.lr:g}/0.9")
    print(table(["step"] + names + [f"{n.split()[0]} × float32 momentum" for n in names[2:]], rows))
    print("seconds a step: " + ", ".join(f"{n} {rates[n]:.3f}" for n in names))
    for n in names:
        if stops[n]:
            print(f"{n}: {stops[n]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
