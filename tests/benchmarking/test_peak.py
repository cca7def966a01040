"""The peak microbenchmarks: each unit's kernel compiles to a register-only loop of its product
instruction on every target that has the unit (read from the assembly, on any host), and
measures a finite, positive figure where this host has the unit."""

import math

import pytest

from tvm_fuse import host_features
from tvm_fuse.benchmarking.peak import UNITS, compiled_kernel, measure_peak
from tvm_fuse.target import parse_target

# A CPU that has each unit (the unit's feature, for the skip on this host).
CPUS = {"avx512": "skylake-avx512", "avx2": "haswell", "avx512_vnni": "cascadelake", "avx512_bf16": "cooperlake",
        "amx_int8": "sapphirerapids", "amx_bf16": "sapphirerapids"}
UNIT_LIST = [(precision, unit) for precision, units in UNITS.items() for unit in units]


@pytest.mark.parametrize("precision, unit", UNIT_LIST, ids=[unit.isa for _, unit in UNIT_LIST])
def test_each_units_kernel_is_a_register_only_loop_of_its_instruction(precision, unit):
    _, loop = compiled_kernel(unit, 1, parse_target(f"llvm -mcpu={CPUS[unit.isa]}"))
    products = [line for line in loop.splitlines() if line.startswith(unit.mnemonic.split("\\")[0])]
    assert len(products) >= unit.accumulators and all(unit.register in line for line in products)


@pytest.mark.parametrize("precision", sorted(UNITS))
def test_measure_peak_is_positive_and_finite_where_the_host_has_the_unit(precision):
    if not any(unit.feature in host_features() for unit in UNITS[precision]):
        pytest.skip(f"this host has no {precision} unit")
    peak = measure_peak(num_threads=1, duration=0.002, repeat=2, precision=precision)
    assert peak.gflops > 0 and math.isfinite(peak.gflops)
    assert peak.per_core_gflops == peak.gflops and peak.precision == precision
