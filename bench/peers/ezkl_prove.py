"""Peer benchmark: how long ezkl takes to prove the INFERENCE of a small MLP.

Model "A-B-C": torch.nn.Sequential(Linear(A,B), ReLU, Linear(B,C)) (ReLU between
every pair of dense layers), random init (seed 0), exported to ONNX with the
legacy TorchScript exporter (torch.onnx.export(..., dynamo=False), opset 17),
input shape [batch, A].

Per model, in its own temporary directory, each phase timed with perf_counter:
  settings_s -- ezkl.gen_settings + ezkl.calibrate_settings (target "resources")
                on a small random data file (--no-calibrate skips calibration).
                Visibility: input private, params fixed (baked into the circuit,
                ezkl's default), output public.
  compile_s  -- ezkl.compile_circuit.
  srs_s      -- ezkl.gen_srs(path, logrows): a LOCAL, insecure test SRS (no
                download; ezkl says "use this only for testing purposes").
  setup_s    -- ezkl.setup (writes pk/vk); pk_bytes = proving-key file size.
  witness_s  -- ezkl.gen_witness on a fresh random input.
  prove_s    -- ezkl.prove, once per --repeats; proof_bytes = proof file size.
  verify_s   -- ezkl.verify on the last proof; verified = its result.

Setup (from the repository root):
  python3 -m venv .venv-ezkl
  .venv-ezkl/bin/pip install ezkl torch==2.13.0 onnx
  .venv-ezkl/bin/python bench/peers/ezkl_prove.py --models 4-16-3 64-64-10 784-56-10 --repeats 1
Prints one JSON line on stdout; progress goes to stderr.
"""
import argparse
import importlib.metadata
import json
import os
import sys
import tempfile
import time
import warnings

import ezkl
import torch

VERSION = importlib.metadata.version("ezkl")


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def build_onnx(sizes, batch, path):
    torch.manual_seed(0)
    layers = []
    for i in range(len(sizes) - 1):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
    model = torch.nn.Sequential(*layers).eval()
    x = torch.randn(batch, sizes[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["output"])


def write_data(path, batch, n_in, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, n_in, generator=g) * 2 - 1
    with open(path, "w") as f:
        json.dump({"input_data": [x.reshape(-1).tolist()]}, f)


def timed(fn, *a, **kw):
    t = time.perf_counter()
    r = fn(*a, **kw)
    return r, time.perf_counter() - t


def run_model(spec, batch, repeats, calibrate):
    sizes = [int(s) for s in spec.split("-")]
    with tempfile.TemporaryDirectory(prefix="ezkl_%s_" % spec) as d:
        p = lambda n: os.path.join(d, n)  # noqa: E731
        build_onnx(sizes, batch, p("model.onnx"))
        write_data(p("cal.json"), batch, sizes[0], 1)
        write_data(p("input.json"), batch, sizes[0], 2)

        args = ezkl.PyRunArgs()
        args.input_visibility = "private"
        args.output_visibility = "public"
        args.param_visibility = "fixed"

        def settings():
            assert ezkl.gen_settings(p("model.onnx"), p("settings.json"), py_run_args=args)
            if calibrate:
                ezkl.calibrate_settings(p("cal.json"), p("model.onnx"), p("settings.json"),
                                        "resources")
        log(f"[{spec}] settings"); _, settings_s = timed(settings)
        with open(p("settings.json")) as f:
            st = json.load(f)
        logrows = st["run_args"]["logrows"]

        log(f"[{spec}] compile (logrows={logrows})")
        _, compile_s = timed(ezkl.compile_circuit, p("model.onnx"), p("model.ezkl"),
                             p("settings.json"))
        log(f"[{spec}] gen_srs"); _, srs_s = timed(ezkl.gen_srs, p("kzg.srs"), logrows)
        log(f"[{spec}] setup")
        _, setup_s = timed(ezkl.setup, p("model.ezkl"), p("vk.key"), p("pk.key"),
                           srs_path=p("kzg.srs"))
        log(f"[{spec}] witness")
        _, witness_s = timed(ezkl.gen_witness, p("input.json"), p("model.ezkl"),
                             p("witness.json"))
        prove_s = []
        for i in range(repeats):
            log(f"[{spec}] prove {i + 1}/{repeats}")
            _, t = timed(ezkl.prove, p("witness.json"), p("model.ezkl"), p("pk.key"),
                         p("proof.json"), srs_path=p("kzg.srs"))
            prove_s.append(t)
        log(f"[{spec}] verify")
        ok, verify_s = timed(ezkl.verify, p("proof.json"), p("settings.json"), p("vk.key"),
                             srs_path=p("kzg.srs"))
        return {
            "model": spec, "batch": batch, "logrows": logrows,
            "calibrated": calibrate,
            "settings_s": settings_s, "compile_s": compile_s, "srs_s": srs_s,
            "setup_s": setup_s, "witness_s": witness_s, "prove_s": prove_s,
            "verify_s": verify_s,
            "pk_bytes": os.path.getsize(p("pk.key")),
            "vk_bytes": os.path.getsize(p("vk.key")),
            "proof_bytes": os.path.getsize(p("proof.json")),
            "verified": bool(ok),
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["4-16-3", "64-64-10"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-calibrate", action="store_true")
    a = ap.parse_args()
    results = []
    for spec in a.models:
        t = time.perf_counter()
        try:
            results.append(run_model(spec, a.batch, a.repeats, not a.no_calibrate))
        except Exception as e:  # report and go on with the next model
            results.append({"model": spec, "batch": a.batch, "error": repr(e)})
        log(f"[{spec}] done in {time.perf_counter() - t:.1f}s")
    print(json.dumps({"peer": "ezkl", "version": VERSION,
                      "visibility": {"input": "private", "params": "fixed",
                                     "output": "public"},
                      "torch": torch.__version__, "results": results}))


if __name__ == "__main__":
    main()
