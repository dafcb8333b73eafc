"""train.device: ``auto`` by default (the GPU where there is one), the chosen
device in metrics.json, in the run's first printed line and in its summary."""
import json

import pytest
import torch
from omegaconf import OmegaConf

from wavygraph import cli
from wavygraph.config import ConfigError, load_config
from wavygraph.sweep.spec import cell_hash
from wavygraph.train.env import resolve_device

SMALL = ["data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=200", "model.num_layers=2",
         "model.hidden_channels=8", "train.epochs=1", "train.num_threads=1", "train.diagnostics=false",
         "train.progress=false"]
EXPECTED = "cuda:0" if torch.cuda.is_available() else "cpu"


def test_default_is_auto():
    assert load_config(None).train.device == "auto"


def test_a_run_that_sets_nothing_uses_auto_and_says_which_device(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["train", *SMALL, f"out_dir={out}"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"wavygraph: training csbm on {EXPECTED} (train.device=auto)"  # the run's first line
    assert json.loads(printed[1])["device"] == EXPECTED  # the summary
    assert OmegaConf.load(out / "config.yaml").train.device == "auto"
    assert json.loads((out / "metrics.json").read_text())["device"] == EXPECTED


def test_auto_is_the_current_gpu_where_there_is_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="CUDA is not available; use train.device=cpu or auto"):
        resolve_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert str(resolve_device("auto")) == "cuda:1" and str(resolve_device("cuda")) == "cuda:1"
    assert str(resolve_device("cuda:0")) == "cuda:0"  # an explicit index is kept
    with pytest.raises(ConfigError, match="is not a torch device"):
        resolve_device("gpu0")


def test_the_device_does_not_change_sweep_cell_hashes():
    configs = [OmegaConf.to_container(load_config(None, [f"train.device={d}"]), resolve=True)
               for d in ("cpu", "auto", "cuda:1")]
    assert len({cell_hash(c) for c in configs}) == 1
    other = OmegaConf.to_container(load_config(None, ["train.seed=1"]), resolve=True)
    assert cell_hash(other) != cell_hash(configs[0])  # the hash does see hashed keys
