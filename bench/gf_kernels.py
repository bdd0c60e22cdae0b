"""The Ligero field's compiled kernels (Numba) against its NumPy path, at the sizes the prover uses.

    python bench/gf_kernels.py [--repeats 7]

Each operation runs on both paths, alternately, on the same random field elements; the table gives the
fastest of ``--repeats`` runs of each (milliseconds) and the gain. The transforms take ``2^21`` values per
call (rows of ``2^10 … 2^16``); products take the shapes the prover multiplies. The two results are compared
(bit for bit) before they are timed. Needs Numba (``pip install 'circuitgrad[numba]'``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, table  # noqa: E402


def _cases(rng):
    from circuitgrad.backends.zk.circuits import gf
    from circuitgrad.backends.zk.systems.ligero import ntt as transforms
    P = gf.P
    for lg in range(10, 17):
        n = 1 << lg
        x = rng.integers(0, P, ((1 << 21) // n, n))
        c = x[:, :n // 4].copy()
        yield "ntt", f"{x.shape[0]}×2^{lg}", transforms.ntt, (x,)
        yield "intt", f"{x.shape[0]}×2^{lg}", transforms.intt, (x,)
        yield "coset_eval", f"{c.shape[0]}×2^{lg - 2} → 2^{lg}", transforms.coset_eval, (c, n)
    for lg in (13, 16, 19, 22):
        a, b = rng.integers(0, P, 1 << lg), rng.integers(0, P, 1 << lg)
        yield "mul", f"2^{lg} · 2^{lg}", gf.mul, (a, b)
        m = a.reshape(-1, 1 << 10)
        yield "mul", f"{m.shape[0]}×2^10 · 2^10", gf.mul, (m, b[:1 << 10])
        yield "mul", f"2^{lg} · constant", gf.mul, (a, 123456789123)
    for m, k, n in [(1, 2, 32768), (1, 25, 32768), (3, 25, 8341), (3, 64, 32768), (40, 9000, 3), (300, 149, 8192),
                    (256, 1024, 256)]:
        yield "matmul", f"({m}×{k}) @ ({k}×{n})", gf.matmul, (rng.integers(0, P, (m, k)), rng.integers(0, P, (k, n)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    from circuitgrad.backends.zk.circuits import gf
    old = gf.set_kernels("numba")
    gf.kernels()                                     # loads Numba and the cached kernels outside the timings
    rows = []
    for op, size, fn, fargs in _cases(np.random.default_rng(0)):
        best = {}
        for path in ("numpy", "numba"):
            gf.set_kernels(path)
            best[path] = fn(*fargs)
        assert np.array_equal(best["numpy"], best["numba"]), (op, size)
        times = {"numpy": [], "numba": []}
        for _ in range(args.repeats):
            for path in times:
                gf.set_kernels(path)
                t = time.perf_counter()
                fn(*fargs)
                times[path].append(time.perf_counter() - t)
        tn, tk = min(times["numpy"]) * 1e3, min(times["numba"]) * 1e3
        rows.append([op, size, f"{tn:.2f}", f"{tk:.2f}", f"{tn / tk:.1f}×"])
    gf.set_kernels(old)
    print(f"Ligero field kernels, NumPy path against Numba; {machine()}; fastest of {args.repeats}")
    print(table(["operation", "size", "NumPy ms", "Numba ms", "gain"], rows))


if __name__ == "__main__":
    main()
