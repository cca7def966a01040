from __future__ import annotations

import json

import pytest

from tvm_fuse import CalibrationTable, InputError
from tvm_fuse.calibration_table import TensorScale


def test_a_saved_table_loads_back_equal(tmp_path):
    table = CalibrationTable({"relu1": TensorScale(0.02, 0), "input": TensorScale(0.01, 128)}, "entropy",
                             ("fc",), samples=16)
    path = tmp_path / "resnet.calib.json"
    table.save(path)
    assert CalibrationTable.load(path) == table
    assert [p.name for p in tmp_path.iterdir()] == ["resnet.calib.json"]  # no temporary left


def test_a_file_that_is_not_a_table_is_named(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(InputError, match="not a tvm_fuse calibration table"):
        CalibrationTable.load(path)
    with pytest.raises(InputError, match="cannot read"):
        CalibrationTable.load(tmp_path / "missing.json")
