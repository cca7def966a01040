"""The FMA peak microbenchmark, on the host's own ISA (AVX-512 where it has it, else AVX2)."""

import math

import pytest

from tvm_fuse import host_features
from tvm_fuse.benchmarking.peak import measure_peak


@pytest.mark.skipif("fma" not in host_features(), reason="the peak kernel needs FMA (AVX2) or AVX-512")
def test_measure_peak_is_positive_and_finite():
    peak = measure_peak(num_threads=1, duration=0.002, repeat=2)
    assert peak.gflops > 0 and math.isfinite(peak.gflops)
    assert peak.per_core_gflops == peak.gflops
    assert "vfmadd" in peak.hot_loop and ("zmm" if peak.isa == "avx512" else "ymm") in peak.hot_loop
