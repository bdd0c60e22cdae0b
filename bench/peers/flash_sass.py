"""The peer of ``bench/gpu_sass.py``: FlashAttention-2's kernels as PyTorch ships them for sm_90, counted alike.

PyTorch's CUDA wheel (from PyPI, about 530 MB: downloaded once by pip, then only the two kernels' listings are
kept, in ``~/.cache/circuitgrad/flash-sass/torch-<version>/``) holds FlashAttention-2 (``pytorch_flash``), which
``scaled_dot_product_attention`` runs for bfloat16 where FlashAttention applies. For ``dh = 64``, causal, no
dropout, sequence lengths multiples of the blocks, FlashAttention-2's ``run_mha_fwd_hdim64`` takes
``Flash_fwd_kernel_traits<64, 128, 128, 4>`` (128 queries × 128 keys a block of 4 warps) and, with sm_90's
shared memory, ``run_mha_bwd_hdim64`` ``Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4>`` (8 warps; ``dq``
accumulated by atomic adds, ``REDG``). ``cuobjdump`` (``nvidia-cuda-cuobjdump``) extracts the sm_90 cubins,
``nvdisasm`` lists the kernels, and each kernel's main loop is the innermost loop holding the products of one
block of scores: ``HMMA`` = products × M·N·dh / (16·8·16) / warps (2 forward, 5 backward).
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from typing import Callable

#: the version of PyTorch whose wheel is read (its kernels' names below are this version's)
TORCH = "2.13.0"
#: (what, mangled name, products a block of scores) of the two kernels
KERNELS = [
    ("forward", "_ZN13pytorch_flash16flash_fwd_kernelI23Flash_fwd_kernel_traitsILi64ELi128ELi128ELi4ELb0ELb0EN7cutlass"
                "10bfloat16_tE19Flash_kernel_traitsILi64ELi128ELi128ELi4ES3_EELb0ELb1ELb0ELb0ELb1ELb1ELb0ELb0EEEvNS_"
                "16Flash_fwd_paramsE", 2),
    ("backward", "_ZN13pytorch_flash44flash_bwd_dq_dk_dv_loop_seqk_parallel_kernelI23Flash_bwd_kernel_traitsILi64ELi"
                 "128ELi128ELi8ELi4ELi4ELi4ELb0ELb0EN7cutlass10bfloat16_tE19Flash_kernel_traitsILi64ELi128ELi128ELi8ES3_"
                 "EELb0ELb1ELb0ELb0ELb1ELb1ELb0EEEvNS_16Flash_bwd_paramsE", 5),
]


def traits(name: str) -> tuple[int, int, int, int]:
    """``(dh, M, N, warps)`` of a kernel from its traits' first four parameters in its mangled name."""
    m = re.search(r"kernel_traitsILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E", name)
    assert m, name
    return tuple(int(x) for x in m.groups())


def _function(listing: str, name: str) -> str:
    """The part of an ``nvdisasm`` listing that is function ``name``."""
    parts = re.split(r"(?m)^//-+ \.text\.(\S+) -+$", listing)
    for at in range(1, len(parts) - 1, 2):
        if parts[at] == name:
            return parts[at + 1]
    raise LookupError(f"{name[:60]}… is not in the listing")


class Unavailable(RuntimeError):
    """PyTorch's wheel could not be had (pip offline, or no such wheel): the peer is not counted."""


def listings(cuobjdump: str, nvdisasm: str, cache: str | None = None) -> dict[str, str]:
    """``{what: nvdisasm listing}`` of :data:`KERNELS`, from the cache, else from PyTorch's wheel (downloaded
    into a temporary directory by pip, then deleted); :class:`Unavailable` where pip cannot download it."""
    cache = cache or os.path.join(os.path.expanduser("~/.cache/circuitgrad/flash-sass"), f"torch-{TORCH}")
    paths = {what: os.path.join(cache, f"{what}.sass") for what, _, _ in KERNELS}
    if all(os.path.exists(p) for p in paths.values()):
        return {what: open(p).read() for what, p in paths.items()}
    with tempfile.TemporaryDirectory() as tmp:
        print(f"downloading PyTorch {TORCH}'s CUDA wheel (about 530 MB) for its FlashAttention-2 kernels",
              file=sys.stderr)
        pip = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                              "--platform", "manylinux_2_28_x86_64", "--python-version", "3.12", "-d", tmp,
                              f"torch=={TORCH}"], capture_output=True, text=True)
        if pip.returncode != 0:
            why = (pip.stderr.strip().splitlines() or [f"exit status {pip.returncode}"])[-1]
            raise Unavailable(f"pip could not download torch=={TORCH} ({why})")
        (wheel,) = glob.glob(os.path.join(tmp, "torch-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            lib = z.extract("torch/lib/libtorch_cuda.so", tmp)
        os.remove(wheel)
        cubins = os.path.join(tmp, "cubins")
        os.makedirs(cubins)
        subprocess.run([cuobjdump, "-xelf", "sm_90.cubin", lib], cwd=cubins, check=True, capture_output=True)
        found: dict[str, str] = {}
        for path in sorted(glob.glob(os.path.join(cubins, "*.cubin"))):
            data = open(path, "rb").read()
            todo = [(what, name) for what, name, _ in KERNELS if what not in found and name.encode() in data]
            if todo:
                listing = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True, check=True).stdout
                for what, name in todo:
                    found[what] = _function(listing, name)
        missing = [what for what, _, _ in KERNELS if what not in found]
        if missing:
            raise LookupError(f"PyTorch {TORCH}'s sm_90 cubins hold no FlashAttention-2 {', '.join(missing)} kernel "
                              "of the expected name")
    os.makedirs(cache, exist_ok=True)
    for what, text in found.items():
        with open(paths[what], "w") as fh:
            fh.write(text)
    return found


def rows(listing_of: dict[str, str], loops_of: Callable[[str], list]) -> list[dict]:
    """A row per kernel: its main loop's counts (``loops_of(listing)``: ``gpu_sass``'s innermost loops), and
    instructions per 16 × 16 block of scores (the loop covers M × N scores over its warps)."""
    out = []
    for what, name, products in KERNELS:
        dh, M, N, warps = traits(name)
        per_iteration = products * M * N * dh // (16 * 8 * 16) // warps
        main = [lp for lp in loops_of(listing_of[what]) if lp.ops["HMMA"] == per_iteration]
        if len(main) != 1:
            raise LookupError(f"FlashAttention-2's {what} kernel: {len(main)} loops of {per_iteration} HMMA")
        lp = main[0]
        blocks = M * N / (16 * 16) / warps          # 16 × 16 blocks of scores a warp takes an iteration
        out.append({"kernel": what, "loop": f"{M}×{N} block, {warps} warps", "instructions": lp.instructions,
                    "hmma": lp.ops["HMMA"], "ldg": lp.ops["LDG"], "ldsm": lp.ops["LDSM"], "mufu": lp.ops["MUFU"],
                    "per_hmma": lp.instructions / lp.ops["HMMA"], "per_block": lp.instructions / blocks})
    return out
