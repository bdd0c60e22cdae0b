"""Shared helpers: finite differences and a float64 evaluator for diagrams."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import circuitgrad as cg


def evaluate(d, *inputs):
    """Run diagram ``d`` with the float interpreter (float64 inputs)."""
    return cg.run(cg.schedule(d), [np.asarray(x, dtype=np.float64) for x in inputs])


def all_values(prog, inputs):
    """Every value of ``prog`` (SSA variable -> array) under the float reference rules."""
    from circuitgrad.interpret import FLOAT_RULES
    env = dict(zip(prog.inputs, inputs))
    for a in prog.instrs:
        for r, v in zip(a.results, FLOAT_RULES[type(a.op)](a.op, *(env[x] for x in a.args))):
            env[r] = np.asarray(v)
    return env


def vjp_fd(f, inputs, douts, eps=1e-6):
    """Central finite differences of ``<f(inputs), douts>`` w.r.t. every input."""
    grads = []
    for k, x in enumerate(inputs):
        g = np.zeros_like(x, dtype=np.float64)
        for i in np.ndindex(x.shape):
            xp = [np.array(v, dtype=np.float64) for v in inputs]
            xm = [np.array(v, dtype=np.float64) for v in inputs]
            xp[k][i] += eps
            xm[k][i] -= eps
            fp = sum(float(np.sum(a * b)) for a, b in zip(f(*xp), douts))
            fm = sum(float(np.sum(a * b)) for a, b in zip(f(*xm), douts))
            g[i] = (fp - fm) / (2 * eps)
        grads.append(g)
    return grads


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = max(np.linalg.norm(a), np.linalg.norm(b), 1e-12)
    return float(np.linalg.norm(a - b) / scale)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def snarkjs_or_skip() -> str:
    """The snarkjs executable (installed through npm on first use), or skip the test."""
    try:
        from circuitgrad.backends.zk.snarkjs import snarkjs
        return snarkjs(log=lambda s: None)
    except Exception as e:  # ToolMissing, or npm failing without a registry
        pytest.skip(f"snarkjs unavailable: {e}")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args, timeout: int = 1800) -> subprocess.CompletedProcess:
    """``python -m circuitgrad.cli ARGS`` from the repository root, output captured."""
    return subprocess.run([sys.executable, "-m", "circuitgrad.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def train_mlp(dataset: str, batch: int, sizes: list[int], epochs: int, backend: str, lr: float = 0.05):
    """Train an MLP (softmax cross-entropy, momentum, seed 0) on ``backend``; returns (params, test accuracy)."""
    from circuitgrad import datasets, nn
    data = datasets.load(dataset)
    step = cg.compile_model(nn.mlp(batch, sizes), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(lr),
                            backend=backend)
    p = step.init_params(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(epochs):
        for x, y in datasets.batches(data.x_train, data.y_train, batch, rng):
            p = step.step(p, x, y)
    return p, (step.predict(p, data.x_test).argmax(1) == data.y_test).mean()
