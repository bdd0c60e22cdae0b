"""LUT4 and clock model coefficients per FPGA family, fitted by ``python bench/fpga_estimate.py --fit``.

Fitted by non-negative least squares. ``LUT4``: yosys synthesis (synth_ecp5 / synth_ice40) of the sequencer,
18 training designs at 1, 2 and 4 MAC lanes and with one read port; features as
:data:`circuitgrad.backends.fpga.cost.FEATURES`. ``UNROLLED_LUT4``: the unrolled predict,
22 MLPs; features as :data:`circuitgrad.backends.fpga.cost.UNROLLED_FEATURES`.
``PERIOD_NS``: the clock period (ns) nextpnr reaches on the same sequencer designs at 1 and 2 lanes, placed
and routed; features as :data:`circuitgrad.backends.fpga.cost.TIMING_FEATURES`. ``UNROLLED_PERIOD_NS``: the
same for the unrolled MLPs; features as :data:`circuitgrad.backends.fpga.cost.UNROLLED_TIMING_FEATURES`.
The lane terms of ``LUT4`` (``lanes``, ``crossbar``): ``--fit-lanes``, yosys synthesis of 2 designs at 2–8 lanes,
the other terms kept.
Generated: do not edit by hand.
"""
LUT4 = {
    "ecp5": {
        "const": 261.044,
        "rom": 0.589,
        "lanes": 75.138,
        "one_port": 162.77,
        "sequential": 169.025,
        "exp": 216.704,
        "sigmoid": 153.981,
        "tanh": 119.508,
        "compare": 0.0,
        "lutram": 271.548,
        "blocks": 30.081,
        "crossbar": 852.252
    },
    "ice40": {
        "const": 337.741,
        "rom": 0.642,
        "lanes": 0.0,
        "one_port": 99.528,
        "sequential": 369.871,
        "exp": 0.0,
        "sigmoid": 200.677,
        "tanh": 251.985,
        "compare": 292.256,
        "blocks": 20.06,
        "crossbar": 895.173
    }
}

UNROLLED_LUT4 = {
    "ecp5": {
        "add_bits": 0.211,
        "sub_bits": 0.935
    },
    "ice40": {
        "add_bits": 0.288,
        "sub_bits": 0.901
    }
}

PERIOD_NS = {
    "ecp5": {
        "const": 6.559,
        "banks": 0.077,
        "wide": 1.16,
        "tree": 1.562,
        "one_port": 0.519,
        "kluts": 0.347
    },
    "ice40": {
        "const": 16.339,
        "banks": 0.0,
        "wide": 4.985,
        "tree": 1.622,
        "one_port": 1.932,
        "kluts": 2.178
    }
}

UNROLLED_PERIOD_NS = {
    "ecp5": {
        "const": 1.553,
        "operands": 3.668,
        "kbits": 0.374
    },
    "ice40": {
        "const": 0.0,
        "operands": 12.497,
        "kbits": 0.654
    }
}
