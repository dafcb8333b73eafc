"""Files the package writes: strict JSON (null where a value is not finite)
and the user's umask for every atomic write and run folder."""
import json
import math
import os
import stat

import numpy as np
import pytest
import torch

from wavygraph.utils import atomic_torch_save, atomic_write_json, atomic_write_text, dumps_json, strict_json, umask


def _strict_load(text):
    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_strict_json_turns_non_finite_values_into_null():
    obj = {"best_val": -math.inf, "test": float("nan"), "ok": 0.5, "n": np.int64(3), "f": np.float32("nan"),
           "hist": [{"loss": math.inf}, (1.0, float("-inf"))], "t": torch.tensor([1.0, float("nan")]),
           "arr": np.array([np.inf, 2.0]), "flag": np.bool_(True), 3: "int key"}
    out = _strict_load(dumps_json(obj))
    assert out == {"best_val": None, "test": None, "ok": 0.5, "n": 3, "f": None, "hist": [{"loss": None}, [1.0, None]],
                   "t": [1.0, None], "arr": [None, 2.0], "flag": True, "3": "int key"}
    assert strict_json(float("nan")) is None and strict_json(1e308) == 1e308


def test_atomic_json_file_is_strict(tmp_path):
    atomic_write_json(tmp_path / "m.json", {"test": float("nan"), "best_val": -math.inf})
    assert _strict_load((tmp_path / "m.json").read_text()) == {"test": None, "best_val": None}


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_atomic_writes_get_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        assert umask() == mask
        atomic_write_text(tmp_path / "a.yaml", "a: 1\n")
        atomic_write_json(tmp_path / "b.json", {"a": 1})
        atomic_torch_save({"a": 1}, tmp_path / "c.pt")
    finally:
        os.umask(old)
    for name in ("a.yaml", "b.json", "c.pt"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o666 & ~mask, name


def test_sweep_files_and_cell_folders_get_the_umask(tmp_path):
    from wavygraph import cli

    spec = tmp_path / "s.yaml"
    spec.write_text("grid:\n  model.num_layers: [1]\nset: {data.name: csbm, data.csbm.preset: small, "
                    "data.csbm.num_nodes: 100, train.epochs: 1, train.diagnostics: false, train.num_threads: 1}\n"
                    f"out_dir: {tmp_path / 'out'}\n")
    old = os.umask(0o002)
    try:
        assert cli.main(["sweep", str(spec), "--no-progress"]) == 0
    finally:
        os.umask(old)
    out = tmp_path / "out"
    (cell,) = (out / "cells").iterdir()
    assert stat.S_IMODE(os.stat(cell).st_mode) == 0o775
    for path in (out / "sweep.json", cell / "cell.json", cell / "metrics.json", cell / "model.pt"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o664, path
    _strict_load((cell / "cell.json").read_text())
