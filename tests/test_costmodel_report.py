"""``circuitgrad/costmodel/report.py``: the table every target's cost model fills, by definition."""
from __future__ import annotations

import pytest

from circuitgrad.costmodel.report import Cost, Row, group, table


def test_rows_group_paths_by_depth_and_keep_first_appearance_order():
    lines = [("mlp/dense0/linear", {"flops": 10, "seconds": 1e-3}), ("sgd", {"flops": 2, "seconds": 5e-4}),
             ("mlp/dense0/bias", {"flops": 3, "seconds": 2e-3}), ("", {"flops": 1, "seconds": 0.0}),
             ("(inputs)", {"flops": 0, "seconds": 1e-4})]
    rows, total = table(lines, depth=2)
    assert [r.name for r in rows] == ["mlp/dense0", "sgd", "(plumbing)", "(inputs)"]
    assert rows[0].flops == 13 and total.values == {"flops": 16, "seconds": pytest.approx(3.6e-3)}
    assert group("mlp/dense0/linear", 1) == "mlp" and group("", 3) == "(plumbing)"


def test_a_cost_prints_its_table_and_refuses_metrics_it_does_not_have():
    rows, total = table([("a", {"flops": 1_500_000, "bytes": 12, "seconds": 2.5})], depth=1)
    c = Cost("cpu", "this machine", "step", rows, total, ["a note"])
    text = str(c).splitlines()
    assert text[0] == "step on cpu (this machine)"
    assert text[1].split() == ["definition", "FLOPs", "bytes", "predicted", "s"]
    assert text[3].split() == ["a", "1.50M", "12", "2.50", "s"] and text[-1] == "* a note"
    assert c.flops == 1_500_000 and c.seconds == 2.5
    with pytest.raises(AttributeError) as e:
        c.constraints
    assert str(e.value) == "cost: constraints does not apply to target 'cpu' (it has flops, bytes, seconds)"
    with pytest.raises(AttributeError):
        Row("x").cycles
