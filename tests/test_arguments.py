"""Bad input at the API: a clear TypeError/ValueError naming what is wrong, never a traceback
from generated code, never a silently wrong result."""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from _tolerance import assert_sums_close

import circuitgrad as cg
from circuitgrad import datasets, nn, ops
from circuitgrad.codegen import compile_program
from circuitgrad.progress import Progress, progress
from circuitgrad.arguments import ParameterNameError

B = 8
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = nn.dense(B, 4, 16) >> nn.relu(B, 16) >> nn.dense(B, 16, 3)
Q = cg.fixed(16, 8)


@pytest.fixture(scope="module")
def f32():
    return cg.compile_model(MODEL, loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.1))


@pytest.fixture(scope="module")
def fx():
    return cg.compile_model(MODEL, loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)


@pytest.fixture
def xy():
    rng = np.random.default_rng(0)
    return rng.normal(size=(B, 4)), rng.integers(0, 3, size=B)


def _nan(x):
    x = x.copy()
    x[1, 2] = np.nan
    x[3, 0] = np.inf
    return x


# ------------------------------------------------------- item 9: step/predict/gradients/loss
# (id, call(model, params, x, y), exception, exact message) on the float32 model
F32_CASES = [
    ("batch", lambda m, p, x, y: m.step(p, x[:5], y[:5]), ValueError,
     "step: input x must have shape (8, 4), got (5, 4) (this model was built for batch 8; predict accepts any "
     "number of rows)"),
    ("features", lambda m, p, x, y: m.gradients(p, x[:, :3], y), ValueError,
     "gradients: input x must have shape (8, 4), got (8, 3)"),
    ("predict-features", lambda m, p, x, y: m.predict(p, x[:, :3]), ValueError,
     "predict: input x must have shape (n, 4) for any number of rows n, got (8, 3)"),
    ("predict-one-row", lambda m, p, x, y: m.predict(p, x[0]), ValueError,
     "predict: input x must have shape (n, 4) for any number of rows n, got (4,); for a single row pass x[None]"),
    ("complex-x", lambda m, p, x, y: m.step(p, x.astype(complex), y), TypeError,
     "step: input x must be a real-valued array (integer or float dtype), got dtype complex128"),
    ("bool-x", lambda m, p, x, y: m.loss(p, x > 0, y), TypeError,
     "loss: input x must be a real-valued array (integer or float dtype), got dtype bool"),
    ("object-x", lambda m, p, x, y: m.predict(p, None), TypeError,
     "predict: input x must be a real-valued array (integer or float dtype), got NoneType (dtype object)"),
    ("string-x", lambda m, p, x, y: m.predict(p, [["a", "b", "c", "d"]]), TypeError,
     "predict: input x must be a real-valued array (integer or float dtype), got list (dtype <U1)"),
    ("nan-x", lambda m, p, x, y: m.step(p, _nan(x), y), ValueError,
     "step: input x must be finite, got 2 NaN or infinite values"),
    ("nan-x-predict", lambda m, p, x, y: m.predict(p, _nan(x)), ValueError,
     "predict: input x must be finite, got 2 NaN or infinite values"),
    ("huge-x", lambda m, p, x, y: m.step(p, x * 1e300, y), ValueError,
     "step: input x must be finite, got 32 NaN or infinite values (values too large for float32)"),
    ("float-labels", lambda m, p, x, y: m.step(p, x, y.astype(float)), TypeError,
     "step: targets y must be integer class labels of shape (8,) or target rows of shape (8, 3), got float64 "
     "labels; pass integers, e.g. y.astype(int)"),
    ("one-hot-width", lambda m, p, x, y: m.loss(p, x, np.eye(4)[y]), ValueError,
     "loss: targets y must be integer class labels of shape (8,) or target rows of shape (8, 3), got shape (8, 4)"),
    ("labels-length", lambda m, p, x, y: m.step(p, x, y[:5]), ValueError,
     "step: targets y must be integer class labels of shape (8,) or target rows of shape (8, 3), got shape (5,)"),
    ("labels-range", lambda m, p, x, y: m.gradients(p, x, y - 1), ValueError,
     "gradients: targets y must be class labels in 0..2, got values in [-1, 1]"),
    ("nan-targets", lambda m, p, x, y: m.step(p, x, np.full((B, 3), np.nan)), ValueError,
     "step: targets y must be finite, got 24 NaN or infinite values"),
    ("bool-targets", lambda m, p, x, y: m.step(p, x, y > 0), TypeError,
     "step: targets y must be a real-valued array (integer or float dtype), got dtype bool"),
    ("params-list", lambda m, p, x, y: m.step(list(p.values()), x, y), TypeError,
     "step: params must be a dict of arrays by name (as returned by init_params), got list"),
    ("missing", lambda m, p, x, y: m.step({k: v for k, v in p.items() if k != "b1"}, x, y), ParameterNameError,
     "step: missing parameters ['b1']; expected ['W0', 'b0', 'W1', 'b1', 'momentum/W0', 'momentum/b0', "
     "'momentum/W1', 'momentum/b1']"),
    ("missing-state", lambda m, p, x, y: m.step({k: p[k] for k in m.param_names}, x, y), ParameterNameError,
     "step: missing parameters ['momentum/W0', 'momentum/b0', 'momentum/W1', 'momentum/b1']; expected ['W0', "
     "'b0', 'W1', 'b1', 'momentum/W0', 'momentum/b0', 'momentum/W1', 'momentum/b1']"),
    ("unknown", lambda m, p, x, y: m.predict({**p, "w0": p["W0"]}, x), ParameterNameError,
     "predict: unknown parameters ['w0']; expected ['W0', 'b0', 'W1', 'b1']"),
    ("typo", lambda m, p, x, y: m.loss({("w0" if k == "W0" else k): v for k, v in p.items()}, x, y),
     ParameterNameError, "loss: missing parameters ['W0'], unknown parameters ['w0']; expected ['W0', 'b0', 'W1', "
     "'b1']"),
    ("float64-param", lambda m, p, x, y: m.step({**p, "W0": p["W0"].astype(np.float64)}, x, y), TypeError,
     "step: parameter W0 must be float32, got float64; convert it with .astype(np.float32)"),
    ("float64-state", lambda m, p, x, y: m.step({**p, "momentum/b1": np.zeros(3)}, x, y), TypeError,
     "step: parameter momentum/b1 must be float32, got float64; convert it with .astype(np.float32)"),
    ("int-param", lambda m, p, x, y: m.predict({**p, "b0": np.zeros(16, int)}, x), TypeError,
     "predict: parameter b0 must be float32, got int64; convert it with .astype(np.float32)"),
    ("list-param", lambda m, p, x, y: m.step({**p, "b1": [0.0, 0.0, 0.0]}, x, y), TypeError,
     "step: parameter b1 must be a float32 array, got list"),
    ("param-shape", lambda m, p, x, y: m.step({**p, "W0": p["W0"].T}, x, y), ValueError,
     "step: parameter W0 must have shape (4, 16), got (16, 4)"),
]


# the same on the fixed(16,8) model
FIXED_CASES = [
    ("float-params", lambda m, p, x, y: m.step({k: v / 256 for k, v in p.items()}, x, y), TypeError,
     "step: parameter W0 must hold raw fixed(16,8) integers (v means v / 2**8), got float64; use init_params(), "
     "or quantize(values, fixed(16,8)) from circuitgrad for real values"),
    ("float-params-predict", lambda m, p, x, y: m.predict({k: v.astype(np.float32) for k, v in p.items()}, x),
     TypeError, "predict: parameter W0 must hold raw fixed(16,8) integers (v means v / 2**8), got float32; use "
     "init_params(), or quantize(values, fixed(16,8)) from circuitgrad for real values"),
    ("raw-out-of-range", lambda m, p, x, y: m.step({**p, "b0": np.full(16, 40000)}, x, y), ValueError,
     "step: parameter b0 must hold raw values in fixed(16,8)'s range [-32768, 32767], got values in [40000, 40000]"),
    ("nan-x", lambda m, p, x, y: m.step(p, _nan(x), y), ValueError,
     "step: input x must be finite, got 2 NaN or infinite values"),
    ("float-labels", lambda m, p, x, y: m.step(p, x, y.astype(np.float32)), TypeError,
     "step: targets y must be integer class labels of shape (8,) or target rows of shape (8, 3), got float32 "
     "labels; pass integers, e.g. y.astype(int)"),
    ("list-param", lambda m, p, x, y: m.step({**p, "b1": [0, 0, 0]}, x, y), TypeError,
     "step: parameter b1 must be an integer array of raw fixed(16,8) values, got list"),
]


CASES = [("f32",) + c for c in F32_CASES] + [("fx",) + c for c in FIXED_CASES]


@pytest.mark.parametrize("model,call,exc,message", [(c[0],) + c[2:] for c in CASES],
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_bad_arguments_are_clear_errors(request, xy, model, call, exc, message):
    m = request.getfixturevalue(model)
    with pytest.raises(exc) as e:
        call(m, m.init_params(seed=0), *xy)
    assert str(e.value) == message


def test_parameter_name_errors_are_key_and_value_errors():
    assert issubclass(ParameterNameError, KeyError) and issubclass(ParameterNameError, ValueError)


def test_unambiguous_inputs_are_converted(f32, fx, xy):
    x, y = xy
    p = f32.init_params(seed=0)
    want = f32.step(p, x.astype(np.float32), y)
    for xs, ys in [(x, y), (x.tolist(), y.tolist()), (x, y.astype(np.uint8)), (x, np.eye(3)[y]),
                   (x, np.eye(3, dtype=int)[y])]:
        got = f32.step(p, xs, ys)
        assert all(np.array_equal(got[k], want[k]) for k in want)
    xi = np.round(x * 2).astype(int)                      # integer x: real values, converted
    np.testing.assert_array_equal(f32.predict(p, xi), f32.predict(p, xi.astype(np.float32)))
    np.testing.assert_array_equal(fx.predict(fx.init_params(0), xi), fx.predict(fx.init_params(0), xi / 1.0))
    q = fx.init_params(seed=0)
    a = fx.step({k: v.astype(np.int32) for k, v in q.items()}, x, y)    # raw integers of any integer dtype
    assert all(np.array_equal(a[k], fx.step(q, x, y)[k]) for k in a)
    f32.predict({k: p[k] for k in f32.param_names}, x)   # predict/loss/gradients: the state may be left out


def test_fixed_point_params_were_silently_wrong_before():
    """Float params given to a fixed-point model used to be truncated to raw integers (all-zero predictions)."""
    fx = cg.compile_model(MODEL, loss=nn.mse, optimizer=nn.sgd(0.125), dtype=Q)
    fl = {k: v / 256 for k, v in fx.init_params(seed=0).items()}
    with pytest.raises(TypeError, match=re.escape("must hold raw fixed(16,8) integers")):
        fx.predict(fl, np.ones((B, 4)))
    good = fx.predict({k: cg.quantize(v, Q) for k, v in fl.items()}, np.ones((B, 4)))
    assert np.abs(good).max() > 0


# ----------------------------------------------------------- item 10: optimizers and loss
@pytest.mark.parametrize("build,exc,message", [
    (lambda: nn.sgd(float("nan")), ValueError, "sgd: learning rate lr must be a finite number > 0, got nan"),
    (lambda: nn.sgd(float("inf")), ValueError, "sgd: learning rate lr must be a finite number > 0, got inf"),
    (lambda: nn.sgd(-0.1), ValueError, "sgd: learning rate lr must be a finite number > 0, got -0.1"),
    (lambda: nn.sgd(0), ValueError, "sgd: learning rate lr must be a finite number > 0, got 0.0"),
    (lambda: nn.sgd("0.1"), TypeError, "sgd: learning rate lr must be a number, got str '0.1'"),
    (lambda: nn.momentum(float("nan")), ValueError,
     "momentum: learning rate lr must be a finite number > 0, got nan"),
    (lambda: nn.momentum(-1.0), ValueError, "momentum: learning rate lr must be a finite number > 0, got -1.0"),
    (lambda: nn.momentum(0.1, float("nan")), ValueError, "momentum: beta must be a finite number in (0, 1), got nan"),
    (lambda: nn.momentum(0.1, float("inf")), ValueError, "momentum: beta must be a finite number in (0, 1), got inf"),
    (lambda: nn.momentum(0.1, 0.0), ValueError, "momentum: beta must be a finite number in (0, 1), got 0.0"),
    (lambda: nn.Optimizer("mine", float("nan")), ValueError,
     "mine: learning rate lr must be a finite number > 0, got nan"),
], ids=["sgd-nan", "sgd-inf", "sgd-negative", "sgd-zero", "sgd-str", "momentum-nan", "momentum-negative",
        "beta-nan", "beta-inf", "beta-zero", "optimizer-nan"])
def test_bad_learning_rates_are_refused_when_built(build, exc, message):
    with pytest.raises(exc) as e:
        build()
    assert str(e.value) == message


@pytest.mark.parametrize("kwargs,message", [
    (dict(loss=nn.sgd(0.1), optimizer=nn.softmax_cross_entropy),
     "compile_model: loss must be a loss function such as nn.mse or nn.softmax_cross_entropy, got the optimizer "
     "sgd(0.1); did you swap loss= and optimizer=?"),
    (dict(loss=nn.mse, optimizer=nn.mse),
     "compile_model: optimizer must be an Optimizer such as nn.sgd(0.1) or nn.momentum(0.1), got the function mse; "
     "did you swap loss= and optimizer=?"),
    (dict(loss=nn.mse, optimizer=nn.sgd),
     "compile_model: optimizer must be an Optimizer such as nn.sgd(0.1) or nn.momentum(0.1), got the function sgd; "
     "call it with a learning rate, e.g. nn.sgd(0.1)"),
    (dict(loss=nn.mse, optimizer=0.1),
     "compile_model: optimizer must be an Optimizer such as nn.sgd(0.1) or nn.momentum(0.1), got float 0.1"),
    (dict(loss=nn.mse(cg.NdArrayType((B, 3))), optimizer=nn.sgd(0.1)),
     "compile_model: loss must be a loss function such as nn.mse or nn.softmax_cross_entropy, got the diagram mse; "
     "pass the function itself (nn.mse, not nn.mse(T)): compile_model applies it to the model's output type"),
    (dict(loss="mse", optimizer=nn.sgd(0.1)),
     "compile_model: loss must be a loss function such as nn.mse or nn.softmax_cross_entropy, got str 'mse'"),
], ids=["optimizer-as-loss", "loss-as-optimizer", "uncalled-sgd", "number-as-optimizer", "loss-diagram",
        "loss-string"])
def test_compile_model_refuses_swapped_loss_and_optimizer(kwargs, message):
    with pytest.raises(TypeError) as e:
        cg.compile_model(MODEL, **kwargs)
    assert str(e.value) == message


def test_compile_model_refuses_a_model_that_is_no_diagram():
    with pytest.raises(TypeError) as e:
        cg.compile_model(nn.mse, loss=nn.mse, optimizer=nn.sgd(0.1))
    assert str(e.value) == "compile_model: model must be a Diagram such as nn.mlp(8, [4, 16, 3]), got the function mse"


@pytest.mark.parametrize("opt,dtype,message", [
    (nn.sgd(1e-4), cg.fixed(16, 8), "compile_model: learning rate 0.0001 rounds to 0 in fixed(16,8): its smallest "
                                     "step is 2**-8 = 0.00390625; use more fractional bits"),
    (nn.momentum(0.01, 0.9), cg.fixed(32, 4), "compile_model: learning rate 0.01 rounds to 0 in fixed(32,4): its "
                                               "smallest step is 2**-4 = 0.0625; use more fractional bits"),
    (nn.momentum(0.5, 0.001), cg.fixed(16, 8), "compile_model: momentum beta 0.001 rounds to 0 in fixed(16,8): its "
                                                "smallest step is 2**-8 = 0.00390625; use more fractional bits"),
    (nn.sgd(1000.0), cg.fixed(16, 8), "compile_model: learning rate 1000.0 does not fit in fixed(16,8) (range "
                                       "[-128.0, 127.99609375])"),
], ids=["sgd", "momentum-lr", "momentum-beta", "too-large"])
def test_fixed_point_constants_that_round_to_zero_are_refused_at_compile_time(opt, dtype, message):
    with pytest.raises(ValueError) as e:
        cg.compile_model(MODEL, loss=nn.mse, optimizer=opt, dtype=dtype)
    assert str(e.value) == message
    cg.compile_model(MODEL, loss=nn.mse, optimizer=opt)       # fine in float


def test_non_finite_constants_generate_valid_code():
    T = cg.NdArrayType((2, 2), cg.float64)
    d = cg.trace(lambda x: ops.scale(x, float("nan")) + ops.constant(T, float("-inf")), [T], name="f")
    fn, src = compile_program(cg.schedule(d, "f"))
    assert "float('nan')" in src and "float('-inf')" in src
    assert np.isnan(fn(np.ones((2, 2)))[0]).all()


# ------------------------------------------------------------------ item 11: traced values
T = cg.NdArrayType((2, 3))
NOT_YET = "is not supported on traced values yet"
NO_VALUE = ("is not possible on a traced value: it is a wire of the diagram being traced, with no number until "
            "the compiled function runs")
OPS = ("use the functions of circuitgrad.ops (ops.add, ops.mul, ops.div, ops.matmul, ops.exp, ops.log, ops.sqrt, "
       "ops.relu, ops.sigmoid, ops.tanh, ops.softmax, ops.heaviside, ops.sum, ops.max, ops.reshape, ops.permute)")
VAR_CASES = [
    ("pow-float", lambda x: x ** 0.5, "x ** k: k must be an integer ≥ 0, got 0.5; for 1 / x use 1 / x, for a root "
                                      "ops.sqrt"),
    ("floordiv", lambda x: x // 2, f"x // y {NOT_YET}; there is no integer division"),
    ("rpow-negative", lambda x: (-2) ** x, "c ** x: the base must be a finite number > 0, got int -2; for a "
                                           "traced base use ops.exp(ops.log(b) * x)"),
    ("rpow-zero", lambda x: 0.0 ** x, "c ** x: the base must be a finite number > 0, got float 0.0; for a "
                                      "traced base use ops.exp(ops.log(b) * x)"),
    ("abs", lambda x: abs(x), f"abs(x) {NOT_YET}; use ops.relu(x) + ops.relu(-x)"),
    ("gt", lambda x: x > 0, f"the comparison x > y {NOT_YET}; use ops.heaviside(x - y): 1 where x > y, else 0"),
    ("le", lambda x: x <= 0, f"the comparison x <= y {NOT_YET}; use 1 - ops.heaviside(x - y): 1 where x <= y, "
                             f"else 0"),
    ("float", lambda x: float(x), f"float(x) {NO_VALUE}; constants are plain numbers or ops.constant(T, c)"),
    ("if", lambda x: x if x else -x, f"bool(x) (as in `if x:`, `x and y`, `not x`) {NO_VALUE}; the diagram cannot "
                                     f"branch: select with h = ops.heaviside(x), then h * a + (1 - h) * b"),
    ("len", lambda x: len(x), f"len(x) {NO_VALUE}; use x.shape[0]"),
    ("iterate", lambda x: tuple(v for v in x), f"iterating over x {NOT_YET}; a traced value is one wire, not a "
                                               f"sequence"),
    ("np.sin", lambda x: np.sin(x), f"np.sin(...) {NOT_YET}; {OPS}"),
    ("np.maximum", lambda x: np.maximum(x, 0), f"np.maximum(...) {NOT_YET}; for np.maximum(x, 0) use ops.relu(x)"),
    ("array-operand", lambda x: np.ones((2, 3)) * x, f"np.multiply(...) with a ndarray operand {NOT_YET}; arrays in "
                                                     f"a model are parameters (ops.param(T, label)) or constants "
                                                     f"(ops.constant(T, c))"),
    ("np.asarray", lambda x: np.asarray(x), f"np.asarray(x) {NO_VALUE}; {OPS}"),
    ("astype", lambda x: x.astype(np.float64), f"x.astype(...) {NOT_YET}; dtypes never change inside a diagram: "
                                               f"compile_model(dtype=...) retypes a whole model"),
]


@pytest.mark.parametrize("fn,message", [c[1:] for c in VAR_CASES], ids=[c[0] for c in VAR_CASES])
def test_unsupported_operations_on_traced_values(fn, message):
    with pytest.raises(TypeError) as e:
        cg.trace(fn, [T])
    assert str(e.value) == message


SUGAR = [
    ("div", lambda x: x / (x * x + 1.0), lambda x: x / (x * x + 1.0)),
    ("div-number", lambda x: x / 2, lambda x: x / 2),
    ("rdiv", lambda x: 1 / (x * x + 1.0), lambda x: 1 / (x * x + 1.0)),
    ("pow", lambda x: x ** 3, lambda x: x ** 3),
    ("pow-0", lambda x: x ** 0 + x, lambda x: 1.0 + x),
    ("rpow", lambda x: 2 ** x, lambda x: np.exp(np.log(2.0) * x)),
    ("rpow-e", lambda x: np.e ** x + 0.5 ** x, lambda x: np.exp(x) + np.exp(np.log(0.5) * x)),
    ("sum", lambda x: x.sum(), lambda x: x.sum()),
    ("np.sum", lambda x: np.sum(x), lambda x: x.sum()),
    ("sum-axis", lambda x: x.sum(0), lambda x: x.sum(0)),
    ("mean", lambda x: x.mean(1), lambda x: x.mean(1)),
    ("max", lambda x: x.max(0), lambda x: x.max(0)),
    ("reshape", lambda x: x.reshape(6), lambda x: x.reshape(6)),
    ("reshape-tuple", lambda x: x.reshape((3, 2)), lambda x: x.reshape(3, 2)),
    ("np.exp", lambda x: np.exp(x), np.exp),
    ("np.divide", lambda x: np.divide(x, 2.0), lambda x: x / 2.0),
    ("index", lambda x: x[1], lambda x: x[1]),
    ("index-negative", lambda x: x[-1, -2], lambda x: x[-1, -2]),
    ("slice", lambda x: x[:, ::2], lambda x: x[:, ::2]),
    ("slice-clipped", lambda x: x[:, 1:99], lambda x: x[:, 1:99]),
    ("slice-empty", lambda x: x[:, 2:1], lambda x: x[:, 2:1]),
    ("ellipsis-newaxis", lambda x: x[None, ..., 1:], lambda x: x[None, ..., 1:]),
]

INDEX_ERRORS = [
    ("out-of-bounds", lambda x: x[2], "x[...]: index 2 is out of bounds for axis 0 of size 2 (float32[2, 3])"),
    ("too-many", lambda x: x[0, 0, 0], "x[...]: too many indices (3) for float32[2, 3]"),
    ("two-ellipses", lambda x: x[..., ...], "x[...]: an index can only have a single ellipsis ('...')"),
    ("negative-step", lambda x: x[:, ::-1], "x[...]: slices need a positive step, got slice(None, None, -1) on "
                                            "axis 1 (float32[2, 3]); an axis cannot be reversed"),
    ("advanced", lambda x: x[[0, 1]], "x[...]: only integers, slices, '...' and None index a traced value, got "
                                      "list [0, 1] (no advanced indexing)"),
    ("array", lambda x: x[np.array([0, 1])], "x[...]: only integers, slices, '...' and None index a traced value, "
                                             "got ndarray array([0, 1]) (no advanced indexing)"),
    ("array-second", lambda x: x[0, np.array([1, 2])], "x[...]: only integers, slices, '...' and None index a "
                                                       "traced value, got ndarray array([1, 2]) (no advanced "
                                                       "indexing)"),
]


@pytest.mark.parametrize("fn,message", [c[1:] for c in INDEX_ERRORS], ids=[c[0] for c in INDEX_ERRORS])
def test_bad_indices_of_traced_values(fn, message):
    with pytest.raises(IndexError) as e:
        cg.trace(fn, [T])
    assert str(e.value) == message


@pytest.mark.parametrize("fn,ref", [c[1:] for c in SUGAR], ids=[c[0] for c in SUGAR])
def test_operations_on_traced_values(fn, ref, rng):
    from conftest import evaluate
    x = rng.normal(size=(2, 3))
    (got,) = evaluate(cg.trace(fn, [cg.NdArrayType((2, 3), cg.float64)]), x)
    # the interpreter and NumPy may order a sum differently, x**3 be x·x·x or pow, exp/pow be ≤ 1 ulp off:
    # each element takes at most the 6 elements of x and 2 more roundings on either side, and ref(|x|)
    # bounds its terms (a sum of |x|, or the element's own magnitude for products, quotients and exp)
    want = ref(x)
    assert_sums_close(got, want, x.size + 2, np.abs(ref(np.abs(x))))


def test_division_by_the_constant_zero_is_refused_when_traced():
    with pytest.raises(ZeroDivisionError, match=r"^Div: division of float32\[2, 3\] by the constant 0$"):
        cg.trace(lambda x: x / 0, [T])


def test_numpy_scalars_and_arithmetic_ufuncs_still_trace():
    d = cg.trace(lambda x: (np.float32(2) * x + np.float64(0.5), np.add(x, x), np.tanh(x)), [T])
    assert d.target_types == (T, T, T)


@pytest.mark.parametrize("fn,got", [
    (lambda x: None, "None (a missing return?)"),
    (lambda x: 1.5, "float 1.5 (a constant output is ops.constant(T, 1.5))"),
    (lambda x: (x, 2), "a tuple whose item 1 is int 2"),
    (lambda x: [x, "y"], "a list whose item 1 is str 'y'"),
    (lambda x: {"y": x}, "dict {'y': Var(0: float32[2, 3])}"),
], ids=["none", "number", "tuple-with-number", "list-with-str", "dict"])
def test_traced_function_must_return_vars(fn, got):
    with pytest.raises(TypeError) as e:
        cg.trace(fn, [T], name="f")
    assert str(e.value) == f"trace f: the traced function must return a Var (a traced value) or a tuple of Vars, got {got}"


# ------------------------------------------------------------------------ item 12: examples
def _example(*args, script="iris.py"):
    return subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("args,message", [
    (["--batch", "200"], "--batch 200 is larger than the 112 training rows of iris: use --batch 112 or less"),
    (["--batch", "0"], "--batch must be 1 or more, got 0"),
    (["--epochs", "-1"], "--epochs must be 0 or more, got -1"),
    (["--lr", "nan"], "momentum: learning rate lr must be a finite number > 0, got nan"),
    (["--dtype", "fixed", "--frac", "4", "--lr", "0.01"],
     "compile_model: learning rate 0.01 rounds to 0 in fixed(32,4): its smallest step is 2**-4 = 0.0625; use more "
     "fractional bits"),
], ids=["batch-too-large", "batch-zero", "epochs-negative", "lr-nan", "fixed-lr"])
def test_example_refuses_bad_arguments_in_one_line(args, message):
    res = _example(*args)
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.strip().splitlines()[-1] == f"iris.py: error: {message}"
    assert "Traceback" not in res.stderr


def test_digits_example_checks_the_batch_too():
    res = _example("--batch", "5000", script="digits.py")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == ("digits.py: error: --batch 5000 is larger than the 1347 "
                                                   "training rows of digits: use --batch 1347 or less")


def test_batches_refuses_a_batch_larger_than_the_data():
    x, y = np.zeros((5, 2)), np.zeros(5, int)
    with pytest.raises(ValueError) as e:
        datasets.batches(x, y, 6, np.random.default_rng(0))
    assert str(e.value) == "batches: batch must be in 1..5 (the number of rows), got 6"


def test_progress_without_a_terminal_prints_periodic_plain_lines():
    res = _example("--epochs", "2")                      # stdout is a pipe: no bar, plain lines
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("train iris [float32]:")]
    counts = [int(re.match(r"train iris \[float32\]: (\d+)/28 steps(, loss \d\.\d{4})?, \d+\.\d s$", ln).group(1))
              for ln in lines]
    assert counts == [3, 6, 9, 12, 15, 18, 21, 24, 27, 28]
    assert lines[-1].startswith("train iris [float32]: 28/28 steps, loss ")
    assert "\r" not in res.stdout + res.stderr and "it/s" not in res.stderr and "step/s" not in res.stderr
    quiet = _example("--epochs", "2", "--quiet")
    assert "train iris" not in quiet.stdout


def test_progress_helper_lines_and_bar(capsys):
    out = io.StringIO()
    with progress(20, "demo", file=out) as bar:
        for i in range(20):
            bar.update()
            if i == 9:
                bar.set_postfix(loss="0.5000")
    assert [ln.rsplit(",", 1)[0] for ln in out.getvalue().splitlines()] == \
        [f"demo: {n}/20 steps" for n in range(2, 12, 2)] + [f"demo: {n}/20 steps, loss 0.5000" for n in range(12, 22, 2)]
    with Progress(3, "bar", tty=True) as bar:            # a terminal: tqdm draws the bar on stderr
        bar.update(3)
    assert "3/3" in capsys.readouterr().err


# ------------------------------------------------------------------ token ids
@pytest.fixture(scope="module")
def tiny_gpt():
    return cg.compile_model(nn.gpt(2, 4, 7, d=4, heads=1, layers=1), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(0.1))


@pytest.mark.parametrize("ids,exc,message", [
    (np.array([[0, 1, 2, 7], [0, 0, 0, 0]]), ValueError,
     "step: input x holds ids in [0, 7], outside the vocabulary of 7 (ids 0..6)"),
    (np.array([[0, 1, 2, -1], [0, 0, 0, 0]]), ValueError,
     "step: input x holds ids in [-1, 2], outside the vocabulary of 7 (ids 0..6)"),
    (np.zeros((2, 4)), TypeError, "step: input x must hold integer ids of a vocabulary of 7, got float64"),
    (np.zeros((2, 5), dtype=int), ValueError,
     "step: input x must have shape (2, 4) (ids of a vocabulary of 7), got (2, 5)"),
])
def test_token_ids_are_checked_at_the_call(tiny_gpt, ids, exc, message):
    with pytest.raises(exc) as e:
        tiny_gpt.step(tiny_gpt.init_params(0), ids, np.zeros((2, 4), dtype=int))
    assert str(e.value) == message


def test_sequence_targets_are_labels_or_rows(tiny_gpt):
    p = tiny_gpt.init_params(0)
    x = np.zeros((2, 4), dtype=int)
    with pytest.raises(ValueError) as e:
        tiny_gpt.step(p, x, np.full((2, 4), 9))
    assert str(e.value) == "step: targets y must be class labels in 0..6, got values in [9, 9]"
    with pytest.raises(TypeError) as e:
        tiny_gpt.step(p, x, np.zeros((2, 4)))
    assert str(e.value) == ("step: targets y must be integer class labels of shape (2, 4) or target rows of "
                            "shape (2, 4, 7), got float64 labels; pass integers, e.g. y.astype(int)")
    assert tiny_gpt.loss(p, x, np.zeros((2, 4), dtype=int)) == pytest.approx(
        tiny_gpt.loss(p, x, np.eye(7)[np.zeros((2, 4), dtype=int)]), rel=1e-6)
