"""bench/gpu_sass.py, run as a subprocess: its reading of ``nvdisasm`` listings (loops, opcodes, source lines),
and with NVRTC and nvdisasm the attention kernels' loops counted against the products and exponentials their
arithmetic does."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench/gpu_sass.py")

#: a listing as ``nvdisasm -c -g`` writes one: an inner loop (0x30-0x40) inside an outer one (0x10-0x70), a branch
#: forward, and a second innermost loop (0x80-0x90)
LISTING = """\
\t//## File "k.cu", line 10
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
\t//## File "k.cu", line 12
        /*0010*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0020*/                   LDG.E.64 R8, desc[UR4][R2.64] ;
.L_x_1:
        /*0030*/                   FADD R5, R5, 1 ;
        /*0040*/               @P0 BRA `(.L_x_1) ;
\t//## File "k.cu", line 14
        /*0050*/              @!P1 BRA `(.L_x_2) ;
        /*0060*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
.L_x_2:
        /*0070*/               @P2 BRA `(.L_x_0) ;
.L_x_3:
\t//## File "k.cu", line 16
        /*0080*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0090*/                   BRA `(.L_x_3) ;
        /*00a0*/                   EXIT ;
"""

#: two branches back to one label (a ``continue``): one loop, up to the later branch
CONTINUE = """\
.L_x_0:
        /*0000*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0010*/               @P0 BRA `(.L_x_0) ;
        /*0020*/                   FADD R5, R5, 1 ;
        /*0030*/               @P1 BRA `(.L_x_0) ;
        /*0040*/                   EXIT ;
"""


#: a warp's vote and a branch over a block (the online softmax's rescaling) inside a loop: that block counted apart
VOTE = """\
.L_x_0:
        /*0000*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0010*/                   VOTE.ANY P0, P0 ;
        /*0020*/              @!P0 BRA `(.L_x_1) ;
        /*0030*/                   SHFL.BFLY PT, R56, R60, 0x1, 0x1f ;
        /*0040*/                   FMUL R5, R5, R6 ;
.L_x_1:
        /*0050*/                   FADD R5, R5, 1 ;
        /*0060*/               @P1 BRA `(.L_x_0) ;
        /*0070*/                   EXIT ;
"""


#: a vote, a divergence check branching out of the loop (``BRA.DIV``), then the branch on the vote: only the block
#: that branch jumps over is apart, not the loop's second product
DIVERGENT = """\
.L_x_0:
        /*0000*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0010*/                   VOTE.ANY P0, P0 ;
        /*0020*/                   BRA.DIV UR4, `(.L_x_9) ;
        /*0030*/              @!P0 BRA `(.L_x_1) ;
        /*0040*/                   SHFL.BFLY PT, R56, R60, 0x1, 0x1f ;
.L_x_1:
        /*0050*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0060*/               @P1 BRA `(.L_x_0) ;
        /*0070*/                   EXIT ;
.L_x_9:
        /*0080*/                   WARPSYNC.COLLECTIVE R11, `(.L_x_1) ;
        /*0090*/                   EXIT ;
"""


def _loops(tmp_path, text: str) -> list[dict]:
    path = tmp_path / "k.sass"
    path.write_text(text)
    r = subprocess.run([sys.executable, SCRIPT, "--listing", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("text, want", [
    # the outer loop holds the inner one: not innermost; the forward branch is no loop
    (LISTING, [(0x30, 0x40, 12, {"FADD": 1, "BRA": 1}, {}), (0x80, 0x90, 16, {"HMMA": 1, "BRA": 1}, {})]),
    (CONTINUE, [(0, 0x30, 0, {"HMMA": 1, "BRA": 2, "FADD": 1}, {})]),
    (VOTE, [(0, 0x60, 0, {"HMMA": 1, "VOTE": 1, "BRA": 2, "FADD": 1}, {"SHFL": 1, "FMUL": 1})]),
    (DIVERGENT, [(0, 0x60, 0, {"HMMA": 2, "VOTE": 1, "BRA": 3}, {"SHFL": 1})]),
    # a branch on another predicate than the vote's is not the vote's branch
    (VOTE.replace("@!P0 BRA", "@!P2 BRA"), [(0, 0x60, 0, {"HMMA": 1, "VOTE": 1, "BRA": 2, "FADD": 1, "SHFL": 1,
                                                        "FMUL": 1}, {})]),
], ids=["nested", "continue", "vote", "divergent", "other predicate"])
def test_the_innermost_loops_of_a_listing(text, want, tmp_path):
    assert [(x["start"], x["end"], x["line"], x["ops"], x["rare"]) for x in _loops(tmp_path, text)] == want


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_each_off_diagonal_loop_does_its_products_and_exponentials(precision, tmp_path):
    """A step of a loop takes ``keys`` rows of the other side (16 under bf16: m16n8k16, K = 16; 8 under TF32:
    m16n8k8, K = 8) and ``dh = 64`` columns: scores ``keys/8 · dh/K`` products, the weights' product with ``v``
    (or ``dO``, ``q``, ``k``) ``dh/8 · keys/K``; the forward (one pass) scores and output, dq scores, ``dp``,
    dq; dk+dv scores, ``dp``, dk and dv. A lane takes ``16·keys/32`` weights, an exponential each (``MUFU``); the
    forward's rescaling, a branch the warp rarely takes, is counted apart. Spherical attention's kernels do the
    same products, no exponential and no rescaling, and fewer instructions in all (its goal: at most softmax's
    time)."""
    out = tmp_path / "sass.json"
    # S = 128: at 64 a query tile's keys are at most three steps before its diagonal, and NVRTC unrolls the loop whole
    r = subprocess.run([sys.executable, SCRIPT, "--seq", "128", "--precisions", precision, "--unroll", "1",
                        "--kinds", "softmax,spherical", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    if report["status"] != "ok":
        pytest.skip(report["status"])
    keys, K = {"bf16": (16, 16), "tf32": (8, 8)}[precision]
    scores, product = keys // 8 * 64 // K, 64 // 8 * keys // K
    weights = 16 * keys // 32
    want = {("forward", "keys, one pass"): (scores + product, weights),
            ("dq", "keys"): (2 * scores + product, weights), ("dk+dv", "queries"): (2 * scores + 2 * product, weights)}
    spherical = [x for x in report["rows"] if not x["diagonal"] and x["kind"] == "spherical"]
    assert {(x["kernel"], x["loop"]): (x["hmma"], x["mufu"]) for x in spherical} == {
        k: (hmma, 0) for k, (hmma, _) in want.items()}
    totals = {x["kind"]: x["per_block"] for x in report["totals"]}
    assert totals["spherical"] < totals["softmax"] == sum(x["per_block"] for x in report["rows"]
                                                          if not x["diagonal"] and x["kind"] == "softmax")
    off = [x for x in report["rows"] if not x["diagonal"] and x["kind"] == "softmax"]
    assert [(x["kernel"], x["loop"]) for x in off] == list(want)        # one loop each, in the kernels' order
    assert {(x["kernel"], x["loop"]): (x["hmma"], x["mufu"]) for x in off} == want
    # a loop not unrolled takes one step: 16·keys scores, a block of 16 × 16 each 16 keys
    assert all(x["steps"] == 1 and x["per_block"] == x["instructions"] * 16 / keys for x in off)
    loop = {x["loop"]: x for x in off}
    # the rescaling is apart from a step's count; spherical's forward has none
    assert loop["keys, one pass"]["rare"] > 0 and all(x["rare"] == 0 for x in spherical)
    if precision == "bf16":         # the exp form shows: pass 2 took 11 instructions a product with expf; one pass 6.3
        assert loop["keys, one pass"]["per_hmma"] <= 7
        # stored bfloat16 rows are read 16 bytes (two products' operands) a load: 8 loads a step, 16 with 8-byte ones
        assert loop["keys, one pass"]["ldg"] * 2 == loop["keys, one pass"]["hmma"] == loop["keys"]["ldg"] * 4 // 3
        # dk+dv reads q and dO stored (dO: dq's copy), one load for two products, and L, D of a lane's 4 queries
        assert loop["queries"]["ldg"] == loop["queries"]["hmma"] // 2 + 8
    assert loop["keys, one pass"]["per_hmma"] <= (7 if precision == "bf16" else 11)


def test_the_peer_offline_is_a_line_not_a_traceback(tmp_path):
    """``--peer`` where pip cannot download PyTorch's wheel (no index; an empty cache): our kernels are counted
    as ever, the peer is a line saying why it is not, and the JSON holds no peer rows."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "cuobjdump").write_text("#!/bin/sh\nexit 1\n")         # found, never reached: pip fails first
    (bin_ / "cuobjdump").chmod(0o755)
    env = dict(os.environ, HOME=str(tmp_path), PATH=f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}",
               PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    out = tmp_path / "sass.json"
    r = subprocess.run([sys.executable, SCRIPT, "--seq", "128", "--precisions", "bf16", "--unroll", "1", "--kinds",
                        "softmax", "--peer", "--json", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    report = json.loads(out.read_text())
    if report["status"] != "ok":
        pytest.skip(report["status"])
    assert "--peer: pip could not download torch==" in r.stdout and "FlashAttention-2 not counted" in r.stdout
    assert report["peer"] == [] and report["rows"]
