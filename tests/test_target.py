import pytest
import tvm

from tvm_fuse import TargetError, parse_target
from tvm_fuse.target import host_features, isa_features, target_string


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
