"""Changed data are noticed: a graph file's content is part of a sweep cell's
hash and of a training checkpoint (wavygraph.fingerprint)."""
import json
import os
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

from wavygraph import cli
from wavygraph.config import load_config
from wavygraph.fingerprint import changed_files, data_fingerprint, file_fingerprint
from wavygraph.sweep.spec import cell_hash, expand, load_sweep
from wavygraph.train import loop
from wavygraph.train.run_folder import work_dir_of

TINY = ["model.num_layers=1", "model.hidden_channels=8", "train.epochs=2", "train.progress=false",
        "train.diagnostics=false", "train.num_threads=1"]


def _graph(path: Path, seed: int = 0, features: int = 4, n: int = 40) -> None:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = torch.randn(n, features, generator=g) + y[:, None].float()
    edge_index = torch.randint(0, n, (2, 120), generator=g)
    torch.save(Data(x=x, edge_index=edge_index, y=y), path)


def test_fingerprint_is_the_content_and_other_data_sets_have_none(tmp_path):
    path = tmp_path / "g.pt"
    _graph(path)
    fp = file_fingerprint(path)
    assert fp["size"] == path.stat().st_size and len(fp["sha256"]) == 64
    os.utime(path, (1, 1))  # touched: another mtime, the same content
    assert file_fingerprint(path)["sha256"] == fp["sha256"] and file_fingerprint(path)["mtime"] == 1
    cfg = {"name": "file", "path": str(path), "features": None}
    assert list(data_fingerprint(cfg)) == ["path"]
    assert data_fingerprint({"name": "cora", "path": str(path)}) is None
    config = {"data": cfg, "model": {"num_layers": 2}}
    before = cell_hash(config, data_fingerprint(cfg))
    assert before != cell_hash(config) and cell_hash(config, None) == cell_hash(config)
    _graph(path, seed=1)
    assert changed_files({"path": fp}, data_fingerprint(cfg)) == ["path"]
    assert changed_files({"path": fp}, {"path": fp}) == []
    assert cell_hash(config, data_fingerprint(cfg)) != before


def test_sweep_rerun_after_the_graph_file_changed_reruns_the_cell(tmp_path, capsys):
    path = tmp_path / "g.pt"
    _graph(path)
    spec = tmp_path / "sweep.yaml"
    spec.write_text("grid:\n  model.residual: [diffusion]\n"
                    f"set: {{data.name: file, data.path: {path}, {', '.join(t.replace('=', ': ') for t in TINY)}}}\n"
                    f"out_dir: {tmp_path / 'out'}\n")
    cells = tmp_path / "out" / "cells"
    assert cli.main(["sweep", str(spec), "--no-progress"]) == 0
    first = sorted(os.listdir(cells))
    record = json.loads((cells / first[0] / "cell.json").read_text())
    assert record["data_fingerprint"]["path"]["sha256"] == file_fingerprint(path)["sha256"]
    os.utime(path, (1, 1))  # the same content: nothing to rerun
    capsys.readouterr()
    assert cli.main(["sweep", str(spec), "--no-progress"]) == 0
    assert "ran 0, already done 1" in capsys.readouterr().out and sorted(os.listdir(cells)) == first
    _graph(path, seed=1)  # new content, same file name and shape
    assert cli.main(["sweep", str(spec), "--no-progress"]) == 0
    assert "ran 1, already done 0" in capsys.readouterr().out
    now = sorted(os.listdir(cells))
    assert len(now) == 2 and set(first) < set(now)  # the old cell is kept under its own hash
    cell = expand(load_sweep(str(spec)))[0]
    assert cell.hash in now and cell.hash not in first


def test_resume_on_a_changed_graph_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "g.pt"
    _graph(path)
    out = tmp_path / "run"
    real, calls = loop.train_epoch, []

    def interrupt_at_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "train_epoch", interrupt_at_second)
    argv = ["train", "data.name=file", f"data.path={path}", *TINY, "train.epochs=3", "train.checkpoint_every=1",
            f"out_dir={out}"]
    assert cli.main(argv) == 130
    ckpt = torch.load(Path(work_dir_of(out)) / "checkpoint.pt", weights_only=True)
    assert ckpt["data_fingerprint"]["path"]["sha256"] == file_fingerprint(path)["sha256"]
    monkeypatch.setattr(loop, "train_epoch", real)
    for seed, features in ((1, 4), (2, 6)):  # the same width, then another width
        _graph(path, seed=seed, features=features)
        capsys.readouterr()
        assert cli.main(argv + ["--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "another version of data.path" in err, err
    assert not out.exists()
    _graph(path, seed=0)  # the original content back: the run continues
    assert cli.main(argv + ["--resume"]) == 0
    model = torch.load(out / "model.pt", weights_only=False)
    assert model["data_fingerprint"]["path"]["sha256"] == file_fingerprint(path)["sha256"]
