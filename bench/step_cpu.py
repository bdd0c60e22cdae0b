"""Compiled NumPy training step vs PyTorch CPU eager on the same MLP.

    python bench/step_cpu.py [--sizes 784 256 256 10] [--batch 128] [--repeats 7]

Both run one SGD step of an MLP (ReLU, softmax cross-entropy, float32) from
the same initial parameters; the table reports the median per-step time over
``--repeats`` runs of ``--inner`` steps each, and circuitgrad's ratio to PyTorch
measured in the same run.  The implementations are timed in alternation
(one repeat each, round robin) so that machine noise hits them alike.
PyTorch is skipped (and said so) if not installed.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import interleaved_medians, machine, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import blas, nn  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[784, 256, 256, 10])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--inner", type=int, default=50)
    ap.add_argument("--torch-threads", type=int, nargs="*", default=[1, 0],
                    help="PyTorch thread counts to measure (0: PyTorch's default)")
    a = ap.parse_args()
    B, sizes = a.batch, a.sizes
    rng = np.random.default_rng(0)
    x = rng.normal(size=(B, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], size=B)

    step = cg.compile_model(nn.mlp(B, sizes), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.01))
    params = step.init_params(seed=0)
    state = {"p": params}
    yoh = np.eye(sizes[-1], dtype=np.float32)[y]

    def cg_step():
        state["p"] = step.step(state["p"], x, yoh)
    fns = {"circuitgrad (NumPy)": cg_step}
    try:
        import torch
    except ImportError:
        torch = None
        print("PyTorch not installed: only circuitgrad measured")
    default_threads = torch.get_num_threads() if torch is not None else 0
    for threads in (a.torch_threads if torch is not None else []):
        threads = threads or default_threads
        tp = [torch.tensor(params[k], requires_grad=True) for k in step.param_names]
        tx, ty = torch.tensor(x), torch.tensor(y)
        opt = torch.optim.SGD(tp, lr=0.01)

        def torch_step(threads=threads, tp=tp, opt=opt):
            torch.set_num_threads(threads)
            h = tx
            for i in range(len(sizes) - 1):
                h = h @ tp[2 * i] + tp[2 * i + 1]
                if i < len(sizes) - 2:
                    h = torch.relu(h)
            loss = torch.nn.functional.cross_entropy(h, ty)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        fns[f"PyTorch {torch.__version__} eager (CPU, {threads} thread{'s' if threads > 1 else ''})"] = torch_step
    times = interleaved_medians(fns, a.repeats, a.inner)
    t_cg = times["circuitgrad (NumPy)"]
    rows = [[k, f"{t * 1e3:.3f}", f"{t / t_cg:.2f}"] for k, t in times.items()]
    print(f"MLP {'-'.join(map(str, sizes))}, batch {B}, float32 SGD step; {machine()}; "
          f"circuitgrad GEMM: {blas.name()}; median of {a.repeats} x {a.inner} steps")
    print(table(["implementation", "ms / step", "time / circuitgrad time"], rows))
    if len(times) > 1:
        best = min(t for k, t in times.items() if k != "circuitgrad (NumPy)")
        print(f"circuitgrad time / fastest PyTorch time: {t_cg / best:.2f} (<= 1.00: no slower than PyTorch)")


if __name__ == "__main__":
    main()
