"""Proof bundles: the directory ``zk prove`` writes, read as untrusted input by ``zk verify``.

A bundle of ``N`` steps holds exactly::

    chain.json                 {"format": "circuitgrad-zk-bundle", "version": 1, "steps": N, "system": ...,
                                "statement": ..., "circuit_sha256": ..., "first_params_sha256": ...,
                                "last_params_sha256": ..., "options": {...}}
    step_000.proof … step_{N−1}.proof        (Ligero)   or   step_000/ … step_{N−1}/   (snarkjs)
    final.npz                  the parameters after the last step (optional, for the verifier's --final)

Nothing in a bundle is executed or trusted. :func:`read` checks its shape
(every field's type and range, exactly the step files ``steps`` names, no
others) and returns the step paths; the verifier compares ``statement`` with
the statement of the circuit it compiled itself, and uses the options only to
say which differ. :func:`load_params` reads a parameter checkpoint
(``.npz``, no pickles) and validates it against a circuit's parameters.
"""
from __future__ import annotations

import io
import json
import os
import re
import stat
import zipfile
from dataclasses import dataclass

import numpy as np

from ..circuits.formats import FormatError, json_loads, printable, read_untrusted
from ..systems.registry import SYSTEMS

__all__ = ["FORMAT", "VERSION", "Bundle", "read", "write_chain", "step_name", "load_params", "BundleError",
           "read_json", "check_fields", "check_step_files"]

FORMAT = "circuitgrad-zk-bundle"
VERSION = 1
_MAX_CHAIN = 1 << 20             # bytes
_MAX_STEPS = 1_000_000
_HEX64 = re.compile(r"[0-9a-f]{64}")


class BundleError(FormatError):
    """A bundle or checkpoint is missing, malformed, or not what the verifier asked for."""


@dataclass
class Bundle:
    root: str
    steps: int
    system: str
    statement: str
    circuit_sha256: str
    options: dict
    paths: list[str]


def step_name(k: int, system: str) -> str:
    """``step_000.proof`` (Ligero) or ``step_000`` (a snarkjs proof directory): the registered ``system``'s
    :meth:`~..systems.interface.ProofSystem.step_name`."""
    return SYSTEMS[system].step_name(k)


def write_chain(root: str, steps: int, system: str, statement: str, circuit_sha256: str, first: str,
                last: str, options: dict) -> None:
    """Write ``chain.json``, the index of a bundle of ``steps`` proofs of ``system``."""
    with open(os.path.join(root, "chain.json"), "w") as fh:
        json.dump({"format": FORMAT, "version": VERSION, "steps": steps, "system": system,
                   "statement": statement, "circuit_sha256": circuit_sha256, "first_params_sha256": first,
                   "last_params_sha256": last, "options": options}, fh, indent=1)


_FIELDS = {"format": str, "version": int, "steps": int, "system": str, "statement": str, "circuit_sha256": str,
           "first_params_sha256": str, "last_params_sha256": str, "options": dict}


def read(root: str, system: str, systems) -> Bundle:
    """Validate the bundle at ``root`` for proofs of ``system`` (one of the names ``systems``, as the verifier
    chose it: never the bundle); :class:`BundleError` says what is wrong."""
    if not os.path.isdir(root):
        raise BundleError(f"{root}: not a proof directory (zk prove --out writes one)")
    path = os.path.join(root, "chain.json")
    if not os.path.lexists(path):
        raise BundleError(f"{root}: no chain.json: not a proof bundle written by 'circuitgrad zk prove'")
    chain = read_json(path, _MAX_CHAIN, "chain.json")
    if not isinstance(chain, dict) or chain.get("format") != FORMAT:
        raise BundleError(f"{path}: not a circuitgrad proof bundle (format must be {FORMAT!r})")
    check_fields(path, chain, _FIELDS)
    if chain["version"] != VERSION:
        raise BundleError(f"{path}: bundle version {chain['version']} is not supported (this is version {VERSION})")
    if chain["system"] not in systems:
        raise BundleError(f"{path}: unknown proof system {chain['system'][:40]!r}")
    if chain["system"] != system:
        raise BundleError(f"{root} holds {chain['system']} proofs, not {system}: verify them with "
                          f"--system {chain['system']}")
    n = chain["steps"]
    if not 1 <= n <= _MAX_STEPS:
        raise BundleError(f"{path}: steps must be in 1..{_MAX_STEPS}, got {n}")
    for key in ("circuit_sha256", "first_params_sha256", "last_params_sha256"):
        if not _HEX64.fullmatch(chain[key]):
            raise BundleError(f"{path}: {key} must be 64 lowercase hex digits")
    names = [step_name(k, system) for k in range(n)]
    check_step_files(root, names, "chain.json")
    return Bundle(root, n, system, chain["statement"], chain["circuit_sha256"], chain["options"],
                  [os.path.join(root, e) for e in names])


def read_json(path: str, limit: int, what: str):
    """The JSON value in the untrusted file ``path`` (at most ``limit`` bytes); :class:`BundleError` if not."""
    try:
        return json_loads(read_untrusted(path, limit, what).decode("utf-8"))
    except FormatError as e:
        raise BundleError(str(e)) from None
    except (ValueError, RecursionError) as e:        # bad UTF-8 or JSON, huge integers, deep nesting
        raise BundleError(f"{path}: not valid JSON ({printable(str(e))[:200]})") from None


def check_fields(path: str, d: dict, fields: dict[str, type]) -> None:
    """Each ``fields`` key of ``d`` holds a value of its type (a bool is no int)."""
    for key, typ in fields.items():
        v = d.get(key)
        if not isinstance(v, typ) or isinstance(v, bool):
            raise BundleError(f"{path}: field {key!r} must be a {typ.__name__}, got {type(v).__name__}")


def check_step_files(root: str, names: list[str], index: str) -> None:
    """``root`` holds exactly the step files ``names`` (as its ``index`` file says), none a symbolic or hard link."""
    present = {e for e in os.listdir(root) if e.startswith("step_")}
    missing = [e for e in names if e not in present]
    extra = sorted(present - set(names))
    if missing:
        raise BundleError(f"{root}: {index} says {len(names)} steps but {missing[0]} is missing"
                          + (f" ({len(missing)} missing in all)" if len(missing) > 1 else ""))
    if extra:
        raise BundleError(f"{root}: unexpected {printable(extra[0])}: {index} says {len(names)} steps, "
                          f"{names[0]} to {names[-1]}")
    link = next((e for e in names if os.path.islink(os.path.join(root, e))), None)
    if link:
        raise BundleError(f"{root}: {link} is a symbolic link; a bundle holds its own files")
    for e in names:                   # N names of one file would cost N proofs' work for one proof's bytes
        st = os.lstat(os.path.join(root, e))
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            raise BundleError(f"{root}: {e} is a hard link (one of {st.st_nlink} names of one file); a bundle "
                              f"holds its own files")


def _read_npz(path: str, names: list[str], shapes: list[tuple]) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz``: a regular file, no pickles, each member no larger than its shape needs."""
    try:
        raw = read_untrusted(path, what="checkpoint")
    except FormatError as e:
        raise BundleError(str(e)) from None
    sizes = {f"{n}.npy": 8 * int(np.prod(s, dtype=np.int64)) + 4096 for n, s in zip(names, shapes)}
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            for info in zf.infolist():       # before anything is decompressed: no zip bombs
                if info.filename in sizes and info.file_size > sizes[info.filename]:
                    name = info.filename[:-4]
                    got = _npy_shape(zf, info)   # its header only: the checkpoint of another model?
                    want = tuple(shapes[names.index(name)])
                    if got is not None and got != want:
                        raise BundleError(_other_model(path, name, got, want))
                    raise BundleError(f"{path}: member {printable(info.filename)!r} is larger than its shape needs")
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            return {k: z[k] if f"{k}.npy" in sizes else None for k in z.files}   # unknown names: not read
    except BundleError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, KeyError) as e:
        raise BundleError(f"{path}: not a NumPy .npz checkpoint ({printable(str(e))[:200]})") from None


def _npy_shape(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple | None:
    """The shape an ``.npy`` member's header declares (at most 4 KiB decompressed), or None if unreadable."""
    try:
        with zf.open(info) as fh:
            head = io.BytesIO(fh.read(4096))
        version = np.lib.format.read_magic(head)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        return tuple(read(head)[0])
    except Exception:                     # not a readable .npy header: the size check's own message
        return None


def _other_model(path: str, name: str, got: tuple, want: tuple) -> str:
    """A parameter of another shape: the checkpoint was written for another model (or other options)."""
    return (f"{path}: parameter {name} has shape {list(got)} in this checkpoint, but the model needs "
            f"{list(want)}: it is a checkpoint of another model or of other options (--batch, --hidden, "
            f"--option); --init takes one of this model, such as the final.npz that zk prove writes for it")


def load_params(path: str, names: list[str], shapes: list[tuple], dtype) -> list[np.ndarray]:
    """Raw fixed-point parameters from a ``.npz`` checkpoint (``np.savez(path, **params)``), validated.

    The file must hold exactly ``names``, each an integer array of its shape within ``dtype``'s range
    (raw values ``v`` meaning ``v / 2**frac``, as ``step.init_params`` and ``step.step`` give them).
    """
    data = _read_npz(path, names, shapes)
    if set(data) != set(names):
        missing, extra = sorted(set(names) - set(data)), sorted(set(data) - set(names))
        raise BundleError(f"{path}: expected the parameters {names}" + (f"; missing {missing}" if missing else "")
                          + (f"; unexpected {printable(str(extra))[:200]}" if extra else ""))
    out = []
    for n, shape in zip(names, shapes):
        a = data[n]
        if a.shape != tuple(shape):
            raise BundleError(_other_model(path, n, a.shape, tuple(shape)))
        if not np.issubdtype(a.dtype, np.integer):
            raise BundleError(f"{path}: parameter {n} is {a.dtype}; a checkpoint holds raw {dtype} integers "
                              f"(as step.init_params() returns them for a fixed-point model)")
        if a.size and (int(a.min()) < dtype.lo or int(a.max()) > dtype.hi):
            raise BundleError(f"{path}: parameter {n} has values outside {dtype} "
                              f"([{dtype.lo}, {dtype.hi}] raw)")
        out.append(a.astype(np.int64))
    return out
