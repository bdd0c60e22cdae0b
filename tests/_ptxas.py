"""Compile kernel sources for sm_90 with nvcc and read ptxas's report (registers and spills per function)."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

from circuitgrad.backends.gpu.host import check as hostcheck


def ptxas_report(code: str) -> tuple[list[int], list[tuple[str, str]]]:
    """``(registers of each function, (spill stores, spill loads) of each)``; the compile must succeed."""
    with tempfile.TemporaryDirectory() as tmp:
        cu = os.path.join(tmp, "kernels.cu")
        with open(cu, "w") as fh:
            fh.write(code)
        res = subprocess.run([hostcheck.nvcc(), "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o",
                              os.path.join(tmp, "kernels.cubin"), cu], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    log = res.stdout + res.stderr
    return ([int(r) for r in re.findall(r"Used (\d+) registers", log)],
            re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log))
