"""The wheel carries what schedules/ and tuning_logs/ hold, inside the package, and the trained
Fashion-MNIST models."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_maps_schedules_and_tuning_logs_into_the_package(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT), "-w", str(tmp_path)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("tvm_fuse-*.whl")
    packaged = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("schedules", "tuning_logs"):
        shipped = {
            f"tvm_fuse/{folder}/{path.relative_to(ROOT / folder).as_posix()}"
            for path in (ROOT / folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        }
        assert shipped and shipped <= packaged, f"missing from the wheel: {sorted(shipped - packaged)}"
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "tvm_fuse").rglob("*.py")}
    assert modules <= packaged, f"missing from the wheel: {sorted(modules - packaged)}"  # every subpackage listed
    models = {path.relative_to(ROOT).as_posix() for path in (ROOT / "tvm_fuse/benchmarking/models/fashion_mnist").glob("*.onnx")}
    needed = models | {"tvm_fuse/benchmarking/datasets/fashion_mnist.py"}
    assert models and needed <= packaged, f"missing from the wheel: {sorted(needed - packaged)}"


def test_installed_package_finds_its_data():
    import tvm_fuse.schedules
    import tvm_fuse.tuning_logs

    assert (Path(tvm_fuse.tuning_logs.__file__).parent / "README.md").is_file()
    assert tvm_fuse.schedules.__doc__
