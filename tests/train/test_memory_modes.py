"""Training with the memory options: gradient checkpointing gives the scores of the plain run
(full batch, mini-batches, resume), and the reversible ``leapfrog`` those of the stored-graph run."""
import json
import os
import shutil
import sys

import pytest

from wavygraph import cli
from wavygraph.config import load_config
from wavygraph.train import loop, run

SMALL = ["data.name=csbm", "data.csbm.preset=small", "model.num_layers=8", "model.dropout=0.3", "train.epochs=3",
         "train.lr=0.01", "train.progress=false", "train.diagnostics=false", "train.num_threads=1"]


def _train(out, *extra) -> dict:
    assert cli.main(["train", *SMALL, *extra, f"out_dir={out}"]) == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("kind", ["diffusion", "mix", "light_wave"])
def test_gradient_checkpointing_gives_the_same_scores(tmp_path, kind):
    plain = _train(tmp_path / "plain", f"model.residual={kind}")
    ckpt = _train(tmp_path / "ckpt", f"model.residual={kind}", "model.gradient_checkpointing=true")
    for key in ("best_val", "test"):
        assert ckpt[key] == pytest.approx(plain[key], abs=1e-6)
    assert [h["loss"] for h in ckpt["history"]] == pytest.approx([h["loss"] for h in plain["history"]], abs=1e-6)


def test_gradient_checkpointing_with_mini_batches(tmp_path):
    extra = ["model.residual=wave", "train.batch_size=700", "model.ffn=true", "model.source=true"]
    plain = _train(tmp_path / "plain", *extra)
    ckpt = _train(tmp_path / "ckpt", *extra, "model.gradient_checkpointing=true", "model.checkpoint_segments=8")
    assert [h["loss"] for h in ckpt["history"]] == pytest.approx([h["loss"] for h in plain["history"]], abs=1e-6)
    assert ckpt["test"] == pytest.approx(plain["test"], abs=1e-6)


def test_reversible_leapfrog_scores_as_the_stored_graph(tmp_path):
    """The same leapfrog model trained with gradients by inversion and by the stored graph:
    test accuracy within 0.005 (two of the 400 test nodes) after 3 epochs."""
    plain = _train(tmp_path / "plain", "model.residual=leapfrog")
    rev = _train(tmp_path / "rev", "model.residual=leapfrog", "model.reversible=true")
    assert abs(rev["test"] - plain["test"]) <= 0.005 and abs(rev["best_val"] - plain["best_val"]) <= 0.005
    assert rev["history"][-1]["loss"] < rev["history"][0]["loss"]  # it trains


def test_checkpointing_run_resumed_matches_the_plain_run(tmp_path, monkeypatch):
    extra = ["model.residual=light_wave", "train.epochs=4", "train.checkpoint_every=2"]
    plain = run(load_config(None, SMALL + extra + [f"out_dir={tmp_path / 'plain'}"]))
    real = loop.save_checkpoint

    def save_then_stop(job):
        real(job)
        if job.state.epoch == 2:
            raise KeyboardInterrupt  # the run stops right after its checkpoint of epoch 2

    monkeypatch.setattr(loop, "save_checkpoint", save_then_stop)
    args = SMALL + extra + ["model.gradient_checkpointing=true", f"out_dir={tmp_path / 'ckpt'}"]
    with pytest.raises(KeyboardInterrupt):
        run(load_config(None, args))
    monkeypatch.setattr(loop, "save_checkpoint", real)
    resumed = run(load_config(None, args + ["train.resume=true"]))
    for key in ("best_val", "test", "best_epoch"):
        assert resumed[key] == pytest.approx(plain[key], abs=1e-6)


@pytest.mark.slow  # torchrun: four runs of two processes
@pytest.mark.parametrize("memory", [["model.gradient_checkpointing=true"], ["model.reversible=true"]])
def test_distributed_training_with_the_memory_options(tmp_path, memory, torchrun):
    if shutil.which("torchrun") is None and not os.path.exists(os.path.join(os.path.dirname(sys.executable),
                                                                           "torchrun")):
        pytest.skip("torchrun not installed")
    common = SMALL + ["model.residual=leapfrog", "train.batch_size=500", "train.distributed=true"]
    scores = []
    for name, extra in (("plain", []), ("memory", memory)):
        res = torchrun([*common, *extra, f"out_dir={tmp_path / name}"])
        assert res.returncode == 0, res.stderr[-3000:]
        scores.append(json.loads((tmp_path / name / "metrics.json").read_text()))
    assert scores[1]["world_size"] == 2
    assert abs(scores[1]["test"] - scores[0]["test"]) <= 0.005
    assert scores[1]["history"][-1]["loss"] == pytest.approx(scores[0]["history"][-1]["loss"], abs=1e-5)
