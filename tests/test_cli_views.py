"""``circuitgrad cost`` and ``circuitgrad draw`` on a model file."""
import os
import xml.etree.ElementTree as ET

from circuitgrad import cli

IRIS = os.path.join(os.path.dirname(__file__), "..", "examples", "iris.py")


def test_cost_prints_the_table_by_definition(capsys):
    assert cli.main(["cost", IRIS, "--target", "fpga", "--macs", "2"]) == 0
    out = capsys.readouterr().out
    assert "step on fpga (ecp5-85k)" in out
    assert "mlp/dense0" in out and "total" in out and "cycles" in out


def test_cost_gpu_names_the_device(capsys):
    assert cli.main(["cost", IRIS, "--target", "gpu", "--device", "h200"]) == 0
    assert "NVIDIA H200" in capsys.readouterr().out


def test_draw_writes_an_svg(tmp_path, capsys):
    out = tmp_path / "iris.svg"
    assert cli.main(["draw", IRIS, "-o", str(out), "--step"]) == 0
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    assert f"wrote {out}" in capsys.readouterr().out


def test_bad_device_is_one_line_and_status_2(capsys):
    assert cli.main(["cost", IRIS, "--target", "gpu", "--device", "a100"]) == 2
    err = capsys.readouterr().err
    assert err == "circuitgrad cost: --device a100: unknown GPU device; choose one of h100, h200\n"
