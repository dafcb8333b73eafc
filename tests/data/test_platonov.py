"""chameleon-filtered / squirrel-filtered: the authors' ``.npz`` read from
``<root>/<stem>/raw/<stem>.npz``, checked against fixtures written in that
format (and against the real squirrel file where ../shared/data has it)."""
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from wavygraph.cli import main
from wavygraph.data import DatasetNotFoundError, WavygraphDataError, load_dataset
from wavygraph.data.download import STAGING_PREFIX
from wavygraph.data.platonov import URL


def write_npz(root, stem: str, n: int = 30, f: int = 5, splits: int = 10, seed: int = 0, drop=()):
    """A graph in the authors' format: directed edge list, (splits, N) masks."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, 60)
    dst = (src + rng.integers(1, n, 60)) % n
    train = np.zeros((splits, n), bool)
    val, test = train.copy(), train.copy()
    for s in range(splits):
        perm = rng.permutation(n)
        train[s, perm[:10]], val[s, perm[10:20]], test[s, perm[20:]] = True, True, True
    arrays = {
        "node_features": rng.normal(size=(n, f)).astype(np.float32),
        "node_labels": rng.integers(0, 5, n),
        "edges": np.stack([src, dst], 1),
        "train_masks": train, "val_masks": val, "test_masks": test,
    }
    folder = Path(root) / stem / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / f"{stem}.npz", **{k: v for k, v in arrays.items() if k not in drop})
    return arrays


@pytest.mark.parametrize("name, stem", [("chameleon-filtered", "chameleon_filtered"),
                                        ("squirrel-filtered", "squirrel_filtered")])
def test_reads_the_authors_format(tmp_path, name, stem):
    arrays = write_npz(tmp_path, stem, n=30)
    for split in (0, 3, 9):
        data, info = load_dataset(name, str(tmp_path), split=split, download=False)
        assert data.num_nodes == 30 and data.x.dtype == torch.float32
        assert torch.equal(data.x, torch.from_numpy(arrays["node_features"]))
        assert torch.equal(data.y, torch.from_numpy(arrays["node_labels"]))
        for key, mask in (("train_masks", data.train_mask), ("val_masks", data.val_mask), ("test_masks", data.test_mask)):
            assert torch.equal(mask, torch.from_numpy(arrays[key][split]))
        assert info.num_splits == 10 and info.metric == "acc" and info.num_outputs == int(arrays["node_labels"].max()) + 1
    # undirected: every listed edge in both directions, nothing else, no duplicates
    pairs = {(int(a), int(b)) for a, b in arrays["edges"]}
    expected = pairs | {(b, a) for a, b in pairs}
    got = [tuple(e) for e in data.edge_index.t().tolist()]
    assert set(got) == expected and len(got) == len(expected)


def test_hyphenated_folder_and_alias_split_errors(tmp_path):
    write_npz(tmp_path / "x", "squirrel_filtered", splits=3)
    os.rename(tmp_path / "x" / "squirrel_filtered", tmp_path / "x" / "squirrel-filtered")
    data, _ = load_dataset("squirrel-filtered", str(tmp_path / "x"), split=2, download=False)
    assert data.num_nodes == 30
    with pytest.raises(WavygraphDataError, match=r"has 3 splits \(0\.\.2\); got data.split=3"):
        load_dataset("squirrel-filtered", str(tmp_path / "x"), split=3, download=False)


def test_missing_file_and_missing_keys_are_one_line(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset("chameleon-filtered", str(tmp_path / "none"), download=False)
    msg = str(err.value)
    assert "chameleon_filtered.npz" in msg and f"{URL}/chameleon_filtered.npz" in msg and "\n" not in msg
    assert not (tmp_path / "none").exists()
    write_npz(tmp_path, "chameleon_filtered", drop=("val_masks",))
    with pytest.raises(WavygraphDataError, match="lacks val_masks"):
        load_dataset("chameleon-filtered", str(tmp_path), download=False)


def test_cli_error_for_a_missing_file(tmp_path, capsys):
    config = Path(__file__).resolve().parents[2] / "configs" / "cora.yaml"
    rc = main(["train", str(config), "data.name=squirrel-filtered", f"data.root={tmp_path}",
               "data.download=false", "data.normalize_features=false", f"out_dir={tmp_path / 'run'}"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wavygraph: error:") and "squirrel_filtered.npz" in err[0]
    assert not (tmp_path / "run").exists()


def test_download_from_a_local_server(tmp_path, monkeypatch):
    """``download=True`` fetches ``<URL>/<stem>.npz`` (here from 127.0.0.1) through a staging folder."""
    import http.server
    import threading

    src = tmp_path / "src"
    write_npz(src, "squirrel_filtered", n=25)
    body = (src / "squirrel_filtered" / "raw" / "squirrel_filtered.npz").read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if not self.path.endswith("/squirrel_filtered.npz"):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr("wavygraph.data.platonov.URL", f"http://127.0.0.1:{httpd.server_address[1]}/data")
        root = tmp_path / "data"
        data, _ = load_dataset("squirrel-filtered", str(root))
        assert data.num_nodes == 25
        assert (root / "squirrel_filtered" / "raw" / "squirrel_filtered.npz").read_bytes() == body
        assert not [p for p in os.listdir(root) if p.startswith(STAGING_PREFIX)]
        with pytest.raises(DatasetNotFoundError, match="could not download"):
            load_dataset("chameleon-filtered", str(root))  # 404
        assert not (root / "chameleon_filtered").exists()
    finally:
        httpd.shutdown()


def _shared_squirrel() -> Path | None:
    here = Path(__file__).resolve()
    for base in (here.parents[3] / "shared", Path("/work/shared")):
        path = base / "data" / "heterophilous"
        if (path / "squirrel_filtered" / "raw" / "squirrel_filtered.npz").is_file():
            return path
    return None


def test_the_real_squirrel_filtered():
    root = _shared_squirrel()
    if root is None:
        pytest.skip("squirrel_filtered.npz not found in ../shared/data/heterophilous")
    data, info = load_dataset("squirrel-filtered", str(root), split=0, download=False)
    # Platonov et al.'s filtered squirrel: 2,223 nodes, 46,998 directed edges, 5 classes
    assert data.num_nodes == 2223 and data.x.shape[1] == 2089 and info.num_outputs == 5
    assert data.edge_index.shape[1] <= 2 * 46998
    assert not (data.train_mask & data.val_mask).any() and not (data.train_mask & data.test_mask).any()
