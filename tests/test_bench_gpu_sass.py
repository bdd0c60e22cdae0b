"""bench/gpu_sass.py: its reading of ``nvdisasm`` listings (loops, opcodes, source lines), and with NVRTC and
nvdisasm the attention kernels' loops counted against the products and exponentials their arithmetic does."""
from __future__ import annotations

import os
import sys

import pytest

_BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path[:0] = [_BENCH, os.path.join(_BENCH, "peers")]
import flash_sass  # noqa: E402
import gpu_sass  # noqa: E402
from _nvrtc import load  # noqa: E402

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


def test_the_innermost_loops_of_a_listing():
    instrs, labels = gpu_sass.parse(LISTING)
    assert [i.op for i in instrs] == ["MOV", "HMMA", "LDG", "FADD", "BRA", "BRA", "HMMA", "BRA", "HMMA", "BRA",
                                      "EXIT"]
    assert labels == {".L_x_0": 0x10, ".L_x_1": 0x30, ".L_x_2": 0x70, ".L_x_3": 0x80}
    assert [i.line for i in instrs] == [10, 12, 12, 12, 12, 14, 14, 14, 16, 16, 16]
    loops = gpu_sass.loops(instrs, labels)      # the outer loop holds the inner one: not innermost
    assert [(lp.start, lp.end, lp.line, dict(lp.ops)) for lp in loops] == [
        (0x30, 0x40, 12, {"FADD": 1, "BRA": 1}), (0x80, 0x90, 16, {"HMMA": 1, "BRA": 1})]
    assert [lp.instructions for lp in loops] == [2, 2]


def test_a_loop_is_named_by_its_for_statement():
    lines = ["    for (int jt = 0; jt < r0 / 16; ++jt) {      // pass 1: the rows' statistics",
             "        const bool masked = false; (void)masked;",
             "        x = 1;",
             "    for (long long it = r0 / 16LL; it < (r0 + 16LL) / 16LL; ++it) {",
             "        const bool masked = true; (void)masked;",
             "        y = 2;"]
    assert gpu_sass.label(lines, 3) == ("keys, pass 1", False)
    assert gpu_sass.label(lines, 6) == ("queries", True)
    assert gpu_sass.label(["int x;"], 1) == ("?", False)


def test_flash_attention_kernels_traits_come_from_their_names():
    assert [flash_sass.traits(name) for _, name, _ in flash_sass.KERNELS] == [(64, 128, 128, 4), (64, 128, 128, 8)]
    listing = "//--------------------- .text.a --------------------------\nA\n" \
              "//--------------------- .text.b --------------------------\nB\n"
    assert flash_sass._function(listing, "b").strip() == "B"
    with pytest.raises(LookupError):
        flash_sass._function(listing, "c")


lib, why = load()
tool = gpu_sass.cuda_tool()


@pytest.mark.skipif(lib is None or tool is None, reason=why or "nvdisasm not installed (nvidia-cuda-nvdisasm)")
@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_each_off_diagonal_loop_does_its_products_and_exponentials(precision):
    """A step of a loop takes ``keys`` rows of the other side (16 under bf16: m16n8k16, K = 16; 8 under TF32:
    m16n8k8, K = 8) and ``dh = 64`` columns: scores ``keys/8 · dh/K`` products, the weights' product with ``v``
    (or ``dO``, ``q``, ``k``) ``dh/8 · keys/K``; forward pass 1 the scores, pass 2 scores and output, dq scores,
    ``dp`` and dq, dk+dv scores, ``dp``, dk and dv. A lane takes ``16·keys/32`` weights, an exponential each
    (``MUFU``), and pass 1 rescales its two rows' sums (two more)."""
    keys, K = {"bf16": (16, 16), "tf32": (8, 8)}[precision]
    scores, product = keys // 8 * 64 // K, 64 // 8 * keys // K
    weights = 16 * keys // 32
    want = {("forward", "keys, pass 1"): (scores, weights + 2), ("forward", "keys, pass 2"): (scores + product, weights),
            ("dq", "keys"): (2 * scores + product, weights), ("dk+dv", "queries"): (2 * scores + 2 * product, weights)}
    rows = gpu_sass.measure(precision, (1, 2, 64, 64), 1, tool)
    off = [r for r in rows if not r["diagonal"]]
    assert [(r["kernel"], r["loop"]) for r in off] == list(want)        # one loop each, in the kernels' order
    assert {(r["kernel"], r["loop"]): (r["hmma"], r["mufu"]) for r in off} == want
    # a loop not unrolled takes one step: 16·keys scores, a block of 16 × 16 each 16 keys
    assert all(r["steps"] == 1 and r["per_block"] == r["instructions"] * 16 / keys for r in off)
    if precision == "bf16":         # the exp form shows: pass 2 took 11 instructions a product with expf, 6.4 now
        assert next(r for r in off if r["loop"] == "keys, pass 2")["per_hmma"] <= 8


def test_loops_branching_back_to_one_label_are_one_loop():
    """Two branches back to one label (a ``continue``): one loop, up to the later branch, with all its body."""
    text = """\
.L_x_0:
        /*0000*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0010*/               @P0 BRA `(.L_x_0) ;
        /*0020*/                   FADD R5, R5, 1 ;
        /*0030*/               @P1 BRA `(.L_x_0) ;
        /*0040*/                   EXIT ;
"""
    loops = gpu_sass.loops(*gpu_sass.parse(text))
    assert [(lp.start, lp.end, dict(lp.ops)) for lp in loops] == [(0, 0x30, {"HMMA": 1, "BRA": 2, "FADD": 1})]
