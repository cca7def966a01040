import pytest
import tvm

from tvm_fuse import TargetError, parse_target
from tvm_fuse.target import (
    _cpuinfo_features,
    _llvm_reported_features,
    host_features,
    isa_class,
    isa_features,
    target_string,
    without_amx,
)


@pytest.mark.parametrize(
    "text, mcpu, cores, features",
    [
        ("llvm -mcpu=skylake-avx512", "skylake-avx512", None, {"avx512f", "avx512bw", "avx512vl"}),
        ("llvm -mcpu=cascadelake -num-cores=2", "cascadelake", 2, {"avx512f", "avx512_vnni"}),
        ("llvm -mcpu=haswell", "haswell", None, {"avx2", "fma"}),
        ("llvm -mcpu=haswell -mattr=+avx512f,+avx512bw", "haswell", None, {"avx2", "avx512f", "avx512bw"}),
    ],
)
def test_string_targets_parse_to_the_cpu_and_its_features(text, mcpu, cores, features):
    target = parse_target(text)
    exported = target.export()
    assert exported["mcpu"] == mcpu
    assert exported.get("num-cores") == cores
    assert features <= isa_features(target)


def test_haswell_has_no_avx512_and_skylake_no_vnni():
    assert "avx512f" not in isa_features(parse_target("llvm -mcpu=haswell"))
    assert "avx512_vnni" not in isa_features(parse_target("llvm -mcpu=skylake-avx512"))


def test_dict_and_target_objects_are_accepted():
    from_dict = parse_target({"kind": "llvm", "mcpu": "icelake-server"})
    assert parse_target(from_dict).export()["mcpu"] == "icelake-server"
    assert isinstance(from_dict, tvm.target.Target)


@pytest.mark.parametrize("native", [None, "native"])
def test_native_target_claims_only_what_the_host_executes(native):
    target = parse_target(native)
    assert isa_features(target) == host_features()
    assert target.export()["num-cores"] >= 1


def test_linux_reports_the_features_llvm_does():
    """A process with TVM's runtime alone reads them from /proc/cpuinfo: the same set."""
    assert _cpuinfo_features() == host_features()


def _amx_host(monkeypatch, os_permits: bool):
    """This host as one LLVM names `rocketlake` (a hypervisor's CPU model) whose CPUID reports
    AMX, AVX512-BF16 and AVX512-FP16, with the OS granting AMX or not."""
    features = {**_llvm_reported_features(), "amx-tile": True, "amx-int8": True, "amx-bf16": True,
                "avx512bf16": True, "avx512fp16": True, "avx512vnni": True,
                **{f"avx512{part}": True for part in ("f", "bw", "vl", "dq", "cd")}}
    monkeypatch.setattr("tvm_fuse.target._llvm_reported_features", lambda: features)
    monkeypatch.setattr("tvm_fuse.target.host_cpu", lambda: "rocketlake")
    monkeypatch.setattr("tvm_fuse.target.amx_permitted", lambda: os_permits)


@pytest.mark.parametrize("os_permits", [True, False])
def test_native_target_follows_the_features_not_the_cpu_name(monkeypatch, os_permits):
    _amx_host(monkeypatch, os_permits)
    target = parse_target("native")
    assert isa_features(target) == host_features()
    assert ("amx" in host_features()) == ("amx_bf16" in host_features()) == os_permits
    assert "avx512_bf16" in host_features()
    assert isa_class(target) == ("amx" if os_permits else "avx512-vnni")
    # The brief form (for reports) names what the CPU name leaves out, and nothing turned off.
    brief = target_string(target, brief=True)
    assert ("+amx-int8" in brief) == os_permits and "+avx512bf16" in brief and ",-" not in brief


def test_string_form_round_trips():
    text = "llvm -mcpu=cascadelake -num-cores=2 -mattr=+avx512f,+avx512bw"
    assert target_string(parse_target(text)) == text
    assert target_string(parse_target(target_string(parse_target(None)))) == target_string(parse_target(None))


@pytest.mark.parametrize(
    "bad, message",
    [
        ("cuda", "kind must be 'llvm'"),
        ("llvm -mcpu=pentium9000", "does not know the CPU"),
        ("llvm mcpu=skylake", "-key=value"),
        ("llvm -num-cores=two", "integer"),
        ("", "empty target"),
        (42, "must be a string"),
    ],
)
def test_bad_targets_say_what_is_wrong(bad, message):
    with pytest.raises(TargetError, match=message):
        parse_target(bad)


@pytest.mark.parametrize("target", ["llvm -mcpu=sapphirerapids",
                                    "llvm -mcpu=znver4 -mattr=+amx-tile,+amx-int8,+amx-bf16"])
def test_without_amx_keeps_every_other_feature(target):
    with_amx = parse_target(target)
    features = isa_features(without_amx(with_amx))
    assert features == isa_features(with_amx) - {"amx", "amx_bf16"}
    assert {"avx512_vnni", "avx512_bf16"} <= features
