"""The tensor-core attention kernels' machine code, without a GPU: instructions issued per tensor-core product.

    python bench/gpu_sass.py [--seq 1024] [--dh 64] [--precisions bf16,tf32] [--unroll 1,2]
                             [--kinds softmax,spherical] [--json out.json]

Causal softmax (and spherical) attention's forward and backward over ``[4, 8, S, dh]`` (``bench/gpu_attention.py``'s programs,
q, k, v made inside the program as a GPT makes them, so that bf16 stores them as bfloat16) is compiled by the GPU
backend; each tensor-core kernel (forward, dq, dk+dv) is compiled by NVRTC for sm_90 with CuPy's options (what a
device runs; line numbers on) and disassembled by ``nvdisasm`` (``pip install nvidia-cuda-nvdisasm``). Each
innermost loop that runs tensor-core products (``HMMA``: one ``mma.sync``) is one of a kernel's loops over the
other side's steps; it is named by its source line (the query or key loop, off the diagonal or on it, and its
pass). Counted in its body: instructions, ``HMMA``, global loads and stores (``LDG``, ``STG``), special
functions (``MUFU``: exp, rsqrt) and the instructions per ``HMMA``. The operands' 16-byte alignment, a run-time
test, is taken as true (it is for contiguous operands), so the counts are those of the path a step runs; a
block that a branch after a warp's vote jumps over (the online forward's rescaling: its first step, rarely
later) is counted apart ("rare").

A warp issues one instruction at a time while a product occupies its tensor core for several cycles: a loop
that issues many instructions per product is bound by issue, not by the tensor cores. "instr / 16×16" adds the
off-diagonal loops of a kernel per 16 × 16 block of scores (a bf16 step takes 16 keys, a TF32 step 8); the
total of the three (forward, dq, dk+dv) is what one training step's attention issues per block, for
each kind (``--kinds``: spherical attention's kernels have the same products and no exponentials).
``--peer`` counts FlashAttention-2's kernels, which SDPA runs, alike (``bench/peers/flash_sass.py``: from
PyTorch's CUDA wheel, downloaded once; without ``cuobjdump`` or the wheel, a line says why it is not counted).
Without NVRTC or nvdisasm the script says which is missing and exits with 0.
"""
from __future__ import annotations

import argparse
import collections
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.join(_HERE, "peers"), os.path.join(os.path.dirname(_HERE), "tests")]
from _util import table  # noqa: E402

#: the kernels' classes, in the order a training step runs them, and how the table names them
KERNELS = {"AttentionForward": "forward", "AttentionGradQ": "dq", "AttentionGradKV": "dk+dv"}
#: keys a step of a loop takes (the scores' columns): two 16 × 8 tiles under bf16 (m16n8k16), one under TF32
KEYS = {"bf16": 16, "tf32": 8}
#: the K of each precision's product (m16n8k16, m16n8k8)
K = {"bf16": 16, "tf32": 8}
#: the products a loop's step does over its 16 × keys scores: forward (one pass) scores and O; dq scores, dp,
#: dq; dk+dv scores, dp, dk, dv
PRODUCTS = {("forward", "keys, one pass"): 2, ("dq", "keys"): 3, ("dk+dv", "queries"): 4}


@dataclass
class Instr:
    """One machine instruction: its address, opcode (``HMMA``, without modifiers), whether it is predicated,
    its branch target's label (a ``BRA``), and the source line it comes from (0: none)."""
    addr: int
    op: str
    target: str = ""
    line: int = 0
    guard: str = ""         # its predicate (``!P0``), if any
    rest: str = ""          # what follows the opcode: modifiers and operands


@dataclass
class Loop:
    """An innermost loop: the addresses of its first instruction and its branch back, the source line of that
    branch, and how many of each opcode its body holds: those a step runs (``ops``), and those of a branch the
    warp rarely takes (``rare``: the online softmax's rescaling, :func:`loops`)."""
    start: int
    end: int
    line: int
    ops: collections.Counter = field(default_factory=collections.Counter)
    rare: collections.Counter = field(default_factory=collections.Counter)

    @property
    def instructions(self) -> int:
        return sum(self.ops.values())


_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(?:@(!?U?P[T0-9]+)\s+)?([A-Z][A-Z0-9_]*)([^;]*);")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_LINE = re.compile(r'//## File ".*", line (\d+)')


def parse(sass: str) -> tuple[list[Instr], dict[str, int]]:
    """The instructions of ``nvdisasm -c -g``'s listing, and each label's address (that of the instruction after
    it)."""
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    line = 0
    for text in sass.splitlines():
        if m := _LINE.search(text):
            line = int(m.group(1))
        elif m := _LABEL.match(text.strip()):
            pending.append(m.group(1))
        elif m := _INSTR.match(text):
            addr = int(m.group(1), 16)
            target = re.search(r"`\((\.L_x_\d+)\)", m.group(4)) if m.group(3) == "BRA" else None
            instrs.append(Instr(addr, m.group(3), target.group(1) if target else "", line, m.group(2) or "", m.group(4)))
            for name in pending:
                labels[name] = addr
            pending = []
    return instrs, labels


def loops(instrs: list[Instr], labels: dict[str, int]) -> list[Loop]:
    """The innermost loops, in address order: a label some branch at or after it goes back to, up to the last such
    branch (several, ``continue``-like, are one loop), holding no other loop. A block of a loop that a branch on
    a warp's vote jumps over (``VOTE.ANY Pn`` then ``@!Pn BRA`` forward, within the loop) is a branch the warp
    rarely takes (the online softmax's rescaling): its instructions are counted apart."""
    last: dict[int, tuple[int, int]] = {}
    for i in instrs:
        if i.target in labels and labels[i.target] <= i.addr:
            last[labels[i.target]] = (i.addr, i.line)
    backs = [(lo, hi, line) for lo, (hi, line) in last.items()]
    inner = [b for b in backs if not any(o != b and b[0] <= o[0] and o[1] <= b[1] for o in backs)]
    skipped: list[tuple[int, int]] = []
    for n, i in enumerate(instrs):         # VOTE.ANY P0, …; then @!P0 BRA forward over the branch's body
        vote = re.match(r"(?:\.\w+)*\s+(U?P\d+),", i.rest) if i.op in ("VOTE", "VOTEU") else None
        bra = next((j for j in instrs[n + 1:] if j.op == "BRA" and j.guard == f"!{vote.group(1)}"), None) if vote else None
        if bra is not None and not bra.rest.startswith(".") and labels.get(bra.target, 0) > bra.addr:
            skipped.append((bra.addr, labels[bra.target]))

    def rare(addr: int, lo: int, hi: int) -> bool:
        return any(lo <= a < addr < b <= hi for a, b in skipped)
    return [Loop(lo, hi, line, collections.Counter(i.op for i in instrs if lo <= i.addr <= hi and not rare(i.addr, lo, hi)),
                 collections.Counter(i.op for i in instrs if lo <= i.addr <= hi and rare(i.addr, lo, hi)))
            for lo, hi, line in sorted(inner)]


def label(source_lines: list[str], line: int) -> tuple[str, bool]:
    """What a loop's branch back at ``line`` (1-based) loops over, from the ``for`` statement at or above it:
    ``("queries"/"keys" [, pass], masked)``; masked: whether its steps test the causal mask (the diagonal)."""
    for n in range(min(line, len(source_lines)) - 1, -1, -1):
        m = re.match(r"\s*for \((?:int|long long) (\w+) = [^;]*;[^;]*;[^)]*\) \{\s*(?://\s*(.*))?$", source_lines[n])
        if m:
            masked = "masked = true" in (source_lines[n + 1] if n + 1 < len(source_lines) else "")
            what = {"jt": "keys", "it": "queries"}.get(m.group(1), m.group(1))
            return (f"{what}, {m.group(2).split(':')[0]}" if m.group(2) else what), masked
    return "?", False


def cuda_tool(name: str = "nvdisasm") -> str | None:
    """The CUDA binary tool ``name`` on ``PATH``, else the NVIDIA wheel's (``nvidia-cuda-nvdisasm``,
    ``nvidia-cuda-cuobjdump``: ``nvidia/cu13/bin``)."""
    found = shutil.which(name)
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for path in sorted(glob.glob(os.path.join(root, "cu*", "bin", name))):
            if os.access(path, os.X_OK):
                return path
    return None


def disassemble(cubin: bytes, tool: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        return subprocess.run([tool, "-c", "-g", path], capture_output=True, text=True, check=True).stdout


def kernel_sources(precision: str, shape: tuple[int, ...], unroll: int,
                   kind: str = "softmax") -> list[tuple[str, str]]:
    """``(class name, CUDA source)`` of each tensor-core attention kernel of causal ``kind`` attention's forward
    and backward at ``precision``, as the backend generates them (its loops unrolled ``unroll`` times), the
    operands' alignment test taken as true."""
    import gpu_attention

    from circuitgrad.backends import gpu
    from circuitgrad.backends.gpu import attention_mma
    prog = gpu_attention.programs(kind, shape, stored=True)["forward+backward"]
    was, attention_mma.UNROLL = attention_mma.UNROLL, unroll
    try:
        f = gpu.compile_function(prog, [f"a{i}" for i in range(len(prog.inputs))], "attention", emulate=True,
                                 precision=precision)
    finally:
        attention_mma.UNROLL = was
    out = []
    for i, k in f.kernels.items():
        step = f.plan.steps[i]
        if step.kind != "attention" or not step.instrs[0].op.mma:
            continue
        src, n = re.subn(r"const bool vec = \(\(.*?\) & 15ULL\) == 0;", "const bool vec = true;", k.source)
        assert n, "no alignment test in the attention kernel's source"
        out.append((type(step.instrs[0].op).__name__, src))
    assert {c for c, _ in out} <= set(KERNELS) and out, [c for c, _ in out]
    return out


def measure(precision: str, shape: tuple[int, ...], unroll: int, tool: str, kind: str = "softmax") -> list[dict]:
    """A row per loop of each kernel (:func:`kernel_sources`)."""
    from _nvrtc import compile_source
    rows = []
    for cls, src in kernel_sources(precision, shape, unroll, kind):
        out = compile_source(src, lineinfo=True)
        if not out.ok:
            raise RuntimeError(f"NVRTC refused the {cls} kernel: {out.log[-2000:]}")
        lines = src.splitlines()
        for lp in loops(*parse(disassemble(out.cubin, tool))):
            if not lp.ops["HMMA"]:
                continue
            what, masked = label(lines, lp.line)
            n, hmma = lp.instructions, lp.ops["HMMA"]
            # 16 × 16 blocks of scores the body covers, from its products (each 2·dh/K HMMA a block), not from
            # the unrolling asked for (the compiler may unroll otherwise)
            blocks = hmma / (PRODUCTS[(KERNELS[cls], what)] * 2 * shape[-1] / K[precision])
            rows.append({"kind": kind, "precision": precision, "kernel": KERNELS[cls], "unroll": unroll,
                         "registers": max(out.registers.values()), "loop": what, "diagonal": masked,
                         "instructions": n, "hmma": hmma, "ldg": lp.ops["LDG"], "stg": lp.ops["STG"],
                         "mufu": lp.ops["MUFU"], "rare": sum(lp.rare.values()), "per_hmma": n / hmma,
                         "steps": blocks * 16 / KEYS[precision],
                         "per_block": n / blocks})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--dh", type=int, default=64)
    ap.add_argument("--precisions", default="bf16,tf32")
    ap.add_argument("--unroll", default="1,2", help="the loops' unrolling (attention_mma.UNROLL) to count")
    ap.add_argument("--kinds", default="softmax,spherical", help="the attentions counted (ops.attention's kinds)")
    ap.add_argument("--json", help="write the rows here as JSON")
    ap.add_argument("--peer", action="store_true",
                    help="also count FlashAttention-2's kernels from PyTorch's CUDA wheel (bench/peers/flash_sass.py; a 530 MB "
                         "download the first time)")
    ap.add_argument("--listing", help="only list the innermost loops of this nvdisasm -c -g listing (JSON)")
    a = ap.parse_args(argv)
    if a.listing:
        found = loops(*parse(open(a.listing).read()))
        print(json.dumps([{"start": lp.start, "end": lp.end, "line": lp.line, "ops": dict(lp.ops), "rare": dict(lp.rare)}
                          for lp in found]))
        return 0
    from _nvrtc import load
    lib, why = load()
    tool = cuda_tool()
    if lib is None or tool is None:
        why = why or "nvdisasm not found (pip install nvidia-cuda-nvdisasm)"
        print(f"bench/gpu_sass.py: {why}; nothing counted")
        if a.json:
            with open(a.json, "w") as fh:
                json.dump({"status": f"missing: {why}", "rows": []}, fh)
        return 0
    shape = (4, 8, a.seq, a.dh)
    rows = [r for k in a.kinds.split(",") for p in a.precisions.split(",") for u in map(int, a.unroll.split(","))
            for r in measure(p, shape, u, tool, k)]
    print(f"Tensor-core attention kernels, causal {' and '.join(a.kinds.split(','))} over {list(shape)}, sm_90 "
          "(NVRTC, nvdisasm): each loop over the other side's steps\n")
    print(table(["kind", "precision", "kernel", "unroll", "registers", "loop", "diagonal", "instructions", "HMMA",
                 "LDG", "MUFU", "rare", "instr / HMMA", "instr / 16×16"],
                [[r["kind"], r["precision"], r["kernel"], r["unroll"], r["registers"], r["loop"],
                  "yes" if r["diagonal"] else "",
                  r["instructions"], r["hmma"], r["ldg"], r["mufu"], r["rare"] or "", f"{r['per_hmma']:.1f}",
                  f"{r['per_block']:.0f}"]
                 for r in rows]))
    total = collections.defaultdict(float)
    for r in rows:
        if not r["diagonal"]:
            total[(r["kind"], r["precision"], r["unroll"])] += r["per_block"]
    print("\nOff-diagonal loops, forward + dq + dk+dv, instructions per 16×16 block of scores (\"rare\": the "
          "rescaling branch's, not counted):")
    print(table(["kind", "precision", "unroll", "instructions"], [[k, p, u, f"{v:.0f}"] for (k, p, u), v in total.items()]))
    peer: list[dict] = []
    if a.peer:
        import flash_sass
        cuobjdump, listing = cuda_tool("cuobjdump"), None
        if cuobjdump is None:
            print("\n--peer: cuobjdump not found (pip install nvidia-cuda-cuobjdump); FlashAttention-2 not counted")
        else:
            try:
                listing = flash_sass.listings(cuobjdump, tool)
            except flash_sass.Unavailable as e:
                print(f"\n--peer: {e}; FlashAttention-2 not counted")
        if listing is not None:
            peer = flash_sass.rows(listing, lambda text: loops(*parse(text)))
            fa2 = sum(r["per_block"] for r in peer)
            print(f"\nFlashAttention-2 (PyTorch {flash_sass.TORCH}'s sm_90 bf16 kernels for dh = 64, causal), "
                  "main loop of each:")
            print(table(["kernel", "loop", "instructions", "HMMA", "LDG", "LDSM", "MUFU", "instr / HMMA",
                         "instr / 16×16"],
                        [[r["kernel"], r["loop"], r["instructions"], r["hmma"], r["ldg"], r["ldsm"], r["mufu"],
                          f"{r['per_hmma']:.1f}", f"{r['per_block']:.0f}"] for r in peer]))
            for (k, p, u), v in total.items():
                if p == "bf16":
                    print(f"circuitgrad {k} bf16 (unroll {u}) / FlashAttention-2, instructions per 16×16 block, "
                          f"forward+backward: {v:.0f} / {fa2:.0f} = {v / fa2:.2f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"status": "ok", "shape": shape, "rows": rows, "peer": peer,
                       "totals": [{"kind": k, "precision": p, "unroll": u, "per_block": v}
                                  for (k, p, u), v in total.items()]},
                      fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
