"""Build and compile time of the training step of a deep dense+sigmoid MLP, vs catgrad 0.2.2, and of a GPT.

    python bench/compile.py [--layers 16 64 256 1024] [--repeats 5] [--peer-layers 16 64] [--gpt-layers 12]

Model: L × (dense 64→64 + sigmoid), batch 32, MSE loss, SGD.  "compile" is
everything from the model diagram to a callable step function (parameter
unbinding, reverse derivative, training-step diagram, schedule,
simplification, code generation); "build" (composing the layers) is reported
separately, for both ways of building: ``cg.sequential`` of the layers, and
``>>`` one layer at a time.  The GPT rows build ``nn.gpt(16, 64, 96, d=128,
heads=4, layers=L)`` and compile its AdamW step (the model of
``bench/gpt_cpu.py``).  catgrad runs in its own virtual environment ``.venv-catgrad``
(created by ``--setup-peer``: ``pip install catgrad==0.2.2``) through
``bench/peers/catgrad_compile.py``, in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_PY = os.path.join(ROOT, ".venv-catgrad", "bin", "python")


def build(L: int, width: int, batch: int) -> cg.Diagram:
    return cg.sequential([l for _ in range(L) for l in (nn.dense(batch, width, width), nn.sigmoid(batch, width))])


def build_chained(L: int, width: int, batch: int) -> cg.Diagram:
    """The same model with ``>>``, one layer at a time."""
    m = nn.dense(batch, width, width) >> nn.sigmoid(batch, width)
    for _ in range(L - 1):
        m = m >> nn.dense(batch, width, width) >> nn.sigmoid(batch, width)
    return m


def measure(L: int, width: int, batch: int, repeats: int) -> tuple[float, float, float]:
    """Median seconds: build with ``sequential``, build with ``>>``, compile (round robin)."""
    bs, bc, cs = [], [], []
    for _ in range(repeats):
        t = time.perf_counter()
        m = build(L, width, batch)
        bs.append(time.perf_counter() - t)
        t = time.perf_counter()
        build_chained(L, width, batch)
        bc.append(time.perf_counter() - t)
        t = time.perf_counter()
        cg.compile_model(m, loss=nn.mse, optimizer=nn.sgd(0.01))
        cs.append(time.perf_counter() - t)
    return statistics.median(bs), statistics.median(bc), statistics.median(cs)


def measure_gpt(L: int, repeats: int) -> tuple[float, float]:
    """Median seconds to build the GPT of ``L`` layers and to compile its AdamW step."""
    bs, cs = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        m = nn.gpt(16, 64, 96, d=128, heads=4, layers=L)
        bs.append(time.perf_counter() - t)
        t = time.perf_counter()
        cg.compile_model(m, loss=nn.softmax_cross_entropy, optimizer=nn.adamw(3e-3))
        cs.append(time.perf_counter() - t)
    return statistics.median(bs), statistics.median(cs)


def setup_peer() -> None:
    subprocess.run([sys.executable, "-m", "venv", os.path.join(ROOT, ".venv-catgrad")], check=True)
    subprocess.run([PEER_PY, "-m", "pip", "install", "-q", "catgrad==0.2.2"], check=True)


def peer(layers: list[int], width: int, batch: int, repeats: int) -> dict[int, tuple[float, float]]:
    if not os.path.exists(PEER_PY):
        print("catgrad peer not set up (run with --setup-peer): skipped", file=sys.stderr)
        return {}
    out = subprocess.run([PEER_PY, os.path.join(ROOT, "bench", "peers", "catgrad_compile.py"),
                          "--layers", *map(str, layers), "--width", str(width), "--batch", str(batch),
                          "--repeats", str(repeats)], capture_output=True, text=True, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    return {r["layers"]: (statistics.median(r["build_s"]), statistics.median(r["compile_s"])) for r in res["results"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--peer-layers", type=int, nargs="*", default=[16, 64])
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gpt-layers", type=int, nargs="*", default=[12])
    ap.add_argument("--setup-peer", action="store_true", help="create .venv-catgrad with catgrad 0.2.2")
    a = ap.parse_args()
    if a.setup_peer and not os.path.exists(PEER_PY):
        setup_peer()
    ours = {L: measure(L, a.width, a.batch, a.repeats) for L in a.layers}
    theirs = peer(a.peer_layers, a.width, a.batch, a.repeats) if a.peer_layers else {}
    rows = []
    base = ours[a.layers[0]][2] / a.layers[0]
    for L in sorted(set(ours) | set(theirs)):
        ob, oc_, oc = ours.get(L, (None, None, None))
        tb, tc = theirs.get(L, (None, None))
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        rows.append([L, fmt(oc), f"{oc / L / base:.2f}" if oc else "-", fmt(ob), fmt(oc_),
                     fmt(oc_ + oc) if oc else "-", fmt(tc), fmt(tb), f"{tc / oc:.1f}x" if tc and oc else "-"])
    print(f"training-step compile time, L x (dense {a.width}->{a.width} + sigmoid), batch {a.batch}; "
          f"median of {a.repeats}; {machine()}")
    print(table(["layers", "circuitgrad compile s", "per-layer vs smallest", "build s (sequential)", "build s (>>)",
                 ">> build + compile s", "catgrad 0.2.2 compile s", "catgrad build s", "catgrad / circuitgrad"], rows))
    if a.gpt_layers:
        gpt = [[L, *(f"{v:.3f}" for v in measure_gpt(L, a.repeats))] for L in a.gpt_layers]
        print(f"\nGPT d=128, 4 heads, B=16, S=64, vocab 96, AdamW step; median of {a.repeats}")
        print(table(["layers", "build s", "compile s"], gpt))


if __name__ == "__main__":
    main()
