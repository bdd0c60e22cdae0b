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


def assert_forward_and_reverse(d, ref, rng) -> None:
    """``d`` (parameters unbound) against a float64 NumPy ``ref``: its values within the program's error bound
    (``_tolerance``: the reference sums in its own order), its reverse derivative against central finite
    differences of ``ref`` (relative error < 1e-6)."""
    from _tolerance import assert_programs_close
    xs = [rng.normal(size=t.shape) for t in d.source_types]
    assert_programs_close(evaluate(d, *xs), ref(*xs), cg.schedule(d), xs)
    dys = [rng.normal(size=t.shape) for t in d.target_types]
    grads = evaluate(cg.rdiff(d), *xs, *dys)
    fd = vjp_fd(ref, xs, dys)
    assert len(grads) == len(fd) == len(xs)
    for g, w in zip(grads, fd):
        assert rel_err(g, w) < 1e-6


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
        from circuitgrad.backends.zk.systems.snarkjs import snarkjs
        return snarkjs(log=lambda s: None)
    except Exception as e:  # ToolMissing, or npm failing without a registry
        pytest.skip(f"snarkjs unavailable: {e}")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ptxas_spills(code: str, tmp_path, arch: str = "sm_90") -> dict[str, int]:
    """CUDA ``code`` compiled by nvcc for ``arch`` (asserted to succeed): the spill-store bytes ptxas reports for
    each function ("Function properties for NAME", then its spills)."""
    (tmp_path / "att.cu").write_text(code)
    r = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "att.cubin"),
                        str(tmp_path / "att.cu")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    spills, name = {}, None
    for line in r.stderr.splitlines():
        if "Function properties for " in line:
            name = line.split("Function properties for ")[1].strip()
        elif "bytes spill stores" in line and name is not None:
            spills[name] = int(line.split("bytes spill stores")[0].split(",")[-1])
    return spills


def run_cli(*args, timeout: int = 1800) -> subprocess.CompletedProcess:
    """``python -m circuitgrad.cli ARGS`` from the repository root, output captured."""
    return subprocess.run([sys.executable, "-m", "circuitgrad.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def main_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """``circuitgrad ARGS`` in-process from the repository root: (exit status, stdout, stderr); a failure's
    SystemExit message is on stderr, as the interpreter prints it."""
    from circuitgrad.cli import main
    os.chdir(ROOT)
    capsys.readouterr()
    try:
        rc, extra = main(list(args)), ""
    except SystemExit as e:
        rc, extra = (e.code if isinstance(e.code, int) else 1), ("" if isinstance(e.code, int) else f"{e.code}\n")
    out = capsys.readouterr()
    return rc, out.out, out.err + extra


def zk_step_circuit(dataset: str, batch: int, hidden: list[int], dt=cg.fixed(16, 8), field=None):
    """The ZK circuit of an MLP's SGD training step on ``dataset`` (seed 0) and its witness on the first
    ``batch`` training rows; ``field=None`` is ``zk.compile``'s default for ``dt``."""
    from circuitgrad import datasets, nn
    from circuitgrad.backends import zk
    data = datasets.load(dataset, seed=0)
    step = cg.compile_model(nn.mlp(batch, [data.features, *hidden, data.classes]), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(0.1), dtype=dt)
    c = zk.compile(step) if field is None else zk.compile(step, field=field)
    return c, c.witness(step.init_params(seed=0), data.x_train[:batch], data.y_train[:batch])


def row_reduce_mod_p(rows, p: int) -> tuple[list[list[int]], list[int]]:
    """The reduced row echelon form of ``rows`` over ``F_p`` (Python ints) and its pivot columns."""
    M = [[int(x) % p for x in r] for r in rows]
    pivots, rank = [], 0
    for col in range(len(M[0]) if M else 0):
        hit = next((i for i in range(rank, len(M)) if M[i][col]), None)
        if hit is None:
            continue
        M[rank], M[hit] = M[hit], M[rank]
        inv = pow(M[rank][col], p - 2, p)
        M[rank] = [x * inv % p for x in M[rank]]
        for i in range(len(M)):
            if i != rank and M[i][col]:
                f = M[i][col]
                M[i] = [(x - f * y) % p for x, y in zip(M[i], M[rank])]
        pivots.append(col)
        rank += 1
    return M, pivots


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


# ------------------------------------------------ one case per primitive, for the backends' rule tables
from circuitgrad import primitives as P  # noqa: E402
from circuitgrad.fixedpoint import quantize  # noqa: E402

T = cg.NdArrayType((2, 3))
CASES = [
    P.Add(T), P.Neg(T), P.Mul(T), P.Scale(T, -0.75), P.MatMul(cg.NdArrayType((2, 3)), cg.NdArrayType((3, 2))),
    P.SumTo(T, cg.NdArrayType((3,))), P.Constant(T, 1.5), P.Heaviside(T), P.Sigmoid(T), P.Tanh(T),
    P.Softmax(T), P.Transpose(T), P.Broadcast(cg.NdArrayType((3,)), T),
]
S3 = cg.NdArrayType((2, 3, 3))
IMG = cg.NdArrayType((1, 2, 3, 3))
#: the transformer and convolution vocabulary (the primitives after the first MLP set)
VOCAB = [
    P.Exp(T), P.Log(T), P.Sqrt(T), P.Rsqrt(T), P.Div(T), P.ArgMaxMask(cg.NdArrayType((3, 4))), P.Softmax(S3, causal=True),
    P.OneHot(cg.NdArrayType((2, 3), cg.index(5)), cg.NdArrayType((2, 3, 5))), P.CausalMask(S3),
    P.Permute(S3, (2, 0, 1)), P.BatchMatMul(S3, cg.NdArrayType((2, 3, 2))),
    P.Slice(cg.NdArrayType((4, 3)), ((1, 4, 2), (0, 3, 1))), P.Pad(cg.NdArrayType((2, 3)), cg.NdArrayType((4, 3)),
                                                                  ((1, 4, 2), (0, 3, 1))),
    P.Unfold(IMG, 2, stride=1, padding=1), P.Fold(IMG, 2, stride=1, padding=1),
]
#: where each operand must lie (the operation's domain): (low, high)
DOMAIN = {"Exp": (-3.0, 2.0), "Log": (0.01, 3.0), "Sqrt": (0.0, 3.0), "Rsqrt": (0.004, 3.0)}


def case_id(op) -> str:
    return op.name + ("(causal)" if getattr(op, "causal", 0) else "")


def vocab_inputs(op, rng, scale=3.0, dt=cg.fixed(16, 8)):
    """Raw fixed-point operands of ``op`` inside its domain, with the edge cases its rules must get right."""
    out = []
    for i, t in enumerate(op.source):
        if isinstance(t.dtype, cg.Index):
            out.append(rng.integers(0, t.dtype.n, size=t.shape))
            continue
        lo, hi = DOMAIN.get(op.name, (-scale, scale))
        v = rng.uniform(lo, hi, size=t.shape)
        if op.name == "Div" and i == 1:          # divisors of both signs, away from 0
            v = np.where(v < 0, v - 0.25, v + 0.25)
        if op.name == "ArgMaxMask":              # ties: the first maximum must win
            v[:, 2] = v.max(axis=1)
            v[0, :] = 1.0
        out.append(quantize(v, dt))
    return out


def assert_flipped_bytes_rejected(data: bytes, circuit, public, seed: int, flips: int = 40) -> None:
    """Flip one random bit of ``flips`` random bytes of a Ligero proof file: each is refused by the reader
    (FormatError) or by the verifier."""
    from circuitgrad.backends import zk
    from circuitgrad.backends.zk.systems import ligero
    rng = np.random.default_rng(seed)
    for pos in rng.choice(len(data), flips, replace=False):
        bad = bytearray(data)
        bad[pos] ^= 1 << int(rng.integers(8))
        try:
            p = ligero.loads(bytes(bad))
        except zk.FormatError:
            continue
        assert not zk.verify(p, circuit, public), f"flipping byte {pos} went unnoticed"


def replay_lie(c, inputs, index: int, delta: int, refused=(ArithmeticError, ValueError)):
    """The witness an honest prover computes after lying about value ``index`` (a wire, or a combination: negative)
    by ``delta``, every later value (bits, remainders, products) recomputed from the lie; the wires only, or None
    when the witness program refuses (raises one of ``refused``)."""
    W = np.zeros(c.r1cs.n_wires + c.n_combinations, dtype=np.int64)   # combinations past the wires
    W[0] = 1
    for wires, v in zip(c.input_wires, inputs):
        W[wires.reshape(-1)] = np.asarray(v).reshape(-1)
    try:
        for wires, fn in c.fills:
            W[wires] = np.asarray(fn(W), dtype=np.int64).reshape(-1)
            if index in wires:
                W[index] += delta
    except refused:
        return None
    return W[:c.r1cs.n_wires]


def lookup_and_product_step():
    """A 4-8-3 MLP step over the Ligero field and a witness: lookups and contractions, so both rounds of the
    native prover and every kind of committed row."""
    from circuitgrad import nn
    from circuitgrad.backends import zk
    step = cg.compile_model(nn.mlp(4, [4, 8, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=cg.fixed(16, 8))
    c = zk.compile(step, field=zk.LIGERO51)
    rng = np.random.default_rng(3)
    return c, c.witness(step.init_params(0), rng.uniform(-1, 1, (4, 4)), rng.integers(0, 3, 4))
