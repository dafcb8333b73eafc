"""Downloads through OGB's and PyG's own code, against a server on 127.0.0.1.

OGB's URLs are plain http, so ``http_proxy`` points urllib at the loopback
server below, which answers every request with an OGB-format zip written by
the test. Nothing here reaches beyond 127.0.0.1.
"""
import http.server
import io
import os
import socket
import threading
import urllib.request
import zipfile
from pathlib import Path

import pytest
import torch

from wavygraph.cli import main
from wavygraph.data import DatasetNotFoundError, WavygraphDataError, load_dataset
from wavygraph.data.download import STAGING_PREFIX
from wavygraph.data.ogbn import ogb_folder
from wavygraph.data.ogb_format import ogb_meta

ARXIV_URL = ogb_meta("ogbn-arxiv")["url"]


def _zip_of(folder, arcname: str) -> bytes:
    """The folder zipped under ``arcname/``, as OGB's archives are (arxiv.zip -> arxiv/...)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, _, files in os.walk(folder):
            for f in files:
                full = os.path.join(path, f)
                zf.write(full, os.path.join(arcname, os.path.relpath(full, folder)))
    return buf.getvalue()


class _Server:
    """A proxy-style HTTP server on 127.0.0.1: a GET of a path ending in a
    key of ``files`` gets that body (cut off halfway when ``truncate``), any
    other GET gets 404; the requested URLs are recorded."""

    def __init__(self, files: dict, truncate: bool = False):
        self.files, self.truncate, self.requests = files, truncate, []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                server.requests.append(self.path)
                body = next((b for k, b in server.files.items() if self.path.endswith(k)), None)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                self.wfile.write(body[: len(body) // 2] if server.truncate else body)
                self.wfile.flush()
                if server.truncate:
                    self.connection.shutdown(socket.SHUT_RDWR)

            do_HEAD = do_GET

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _proxy(monkeypatch, url: str) -> None:
    for key in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(key, url)
    for key in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(key, "")
    monkeypatch.setattr(urllib.request, "_opener", None)  # urlopen's cached opener read the old env


def _no_prompt(monkeypatch):
    def refuse(*args):
        raise AssertionError("input() called: a download must never wait for the keyboard")

    monkeypatch.setattr("builtins.input", refuse, raising=False)


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more


@pytest.fixture
def arxiv_zip(ogb_root):
    """OGB's arxiv.zip layout (``arxiv/...``) of the conftest's tiny ogbn-arxiv stand-in."""
    return _zip_of(ogb_root / "ogbn_arxiv", ogb_meta("ogbn-arxiv")["download_name"])


def _leftovers(root):
    return [e for e in os.listdir(root) if e.startswith(STAGING_PREFIX) or e.endswith(".wavygraph-old")]


def test_ogb_downloads_through_its_own_loader(tmp_path, monkeypatch, arxiv_zip, ogb_root):
    _no_prompt(monkeypatch)
    root = tmp_path / "data"
    with _Server({"arxiv.zip": arxiv_zip}) as server:
        _proxy(monkeypatch, server.url)
        data, info = load_dataset("ogbn-arxiv", str(root))
        assert [r for r in server.requests] == [ARXIV_URL]  # OGB's own URL, through the proxy
        again, _ = load_dataset("ogbn-arxiv", str(root))  # present now: no second download
        assert [r for r in server.requests] == [ARXIV_URL]
    folder = root / "ogbn_arxiv"
    assert (folder / "processed" / "geometric_data_processed.pt").exists()
    assert (folder / "RELEASE_v1.txt").exists() and not (root / "arxiv.zip").exists()
    assert data.num_nodes == 120 and info.ogb_name == "ogbn-arxiv"
    assert torch.equal(again.edge_index, data.edge_index) and _leftovers(root) == []
    # the same data as loading the unzipped folder directly
    direct, _ = load_dataset("ogbn-arxiv", str(ogb_root))
    assert torch.equal(direct.x, data.x) and torch.equal(direct.y, data.y)
    assert torch.equal(direct.edge_index, data.edge_index) and torch.equal(direct.test_mask, data.test_mask)


def test_outdated_folder_is_replaced_without_a_prompt(tmp_path, monkeypatch, arxiv_zip):
    _no_prompt(monkeypatch)  # OGB would ask "Will you update the dataset now?"
    root = tmp_path / "data"
    (root / "ogbn_arxiv" / "raw").mkdir(parents=True)
    (root / "ogbn_arxiv" / "raw" / "stale.txt").write_text("old")
    with _Server({"arxiv.zip": arxiv_zip}) as server:
        _proxy(monkeypatch, server.url)
        data, _ = load_dataset("ogbn-arxiv", str(root))
    assert data.num_nodes == 120 and not (root / "ogbn_arxiv" / "raw" / "stale.txt").exists()
    assert _leftovers(root) == []


def test_interrupted_download_leaves_nothing(tmp_path, monkeypatch, arxiv_zip):
    _no_prompt(monkeypatch)
    root = tmp_path / "data"
    root.mkdir()
    with _Server({"arxiv.zip": arxiv_zip}, truncate=True) as server:
        _proxy(monkeypatch, server.url)
        with pytest.raises(DatasetNotFoundError) as err:
            load_dataset("ogbn-arxiv", str(root))
    msg = str(err.value)
    assert ARXIV_URL in msg and "unzip" in msg and "\n" not in msg
    assert os.listdir(root) == []  # no zip, no folder, no staging folder


def test_failed_processing_of_a_download_leaves_nothing(tmp_path, monkeypatch, ogb_root):
    _no_prompt(monkeypatch)
    (ogb_root / "ogbn_arxiv" / "raw" / "node-feat.csv.gz").write_bytes(b"not gzip")
    body = _zip_of(ogb_root / "ogbn_arxiv", "arxiv")
    root = tmp_path / "data"
    with _Server({"arxiv.zip": body}) as server:
        _proxy(monkeypatch, server.url)
        with pytest.raises(WavygraphDataError, match="ogbn-arxiv: OGB could not process the download"):
            load_dataset("ogbn-arxiv", str(root))
    assert not root.exists() or os.listdir(root) == []


@pytest.mark.parametrize("name, url_part", [("ogbn-arxiv", ARXIV_URL), ("cora", "ind.cora.x")])
def test_no_network_names_the_url_and_the_manual_steps(tmp_path, monkeypatch, name, url_part):
    _no_prompt(monkeypatch)
    _proxy(monkeypatch, _closed_port())
    root = tmp_path / "data"
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset(name, str(root))
    msg = str(err.value)
    assert url_part in msg and "without a network" in msg and "\n" not in msg
    assert not root.exists()


@pytest.mark.parametrize("download, needle", [("false", "data.download=false"), ("true", "without a network")])
def test_cli_one_line_error_and_exit_2(tmp_path, monkeypatch, capsys, download, needle):
    _no_prompt(monkeypatch)
    _proxy(monkeypatch, _closed_port())
    root = tmp_path / "data"
    rc = main(["train", "data.name=ogbn-arxiv", f"data.root={root}", f"data.download={download}",
               f"out_dir={tmp_path / 'runs'}", "train.epochs=1", "train.progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0] and "arxiv.zip" in err[0]


def test_pyg_downloads_through_its_own_code(tmp_path, monkeypatch):
    """Planetoid's own ``download`` (fsspec over http), pointed at the loopback server."""
    from torch_geometric.datasets import Planetoid

    shared = Path("/work/shared/data/planetoid/Cora/raw")
    if not shared.is_dir():
        pytest.skip("shared Cora raw files not available")
    files = {f"/planetoid/{p.name}": p.read_bytes() for p in shared.iterdir()}
    root = tmp_path / "data"
    with _Server(files) as server:
        monkeypatch.setattr(Planetoid, "url", f"{server.url}/planetoid")
        data, info = load_dataset("cora", str(root))
        assert {f"/planetoid/{p.name}" for p in shared.iterdir()} <= set(server.requests)
    assert data.num_nodes == 2708 and info.num_outputs == 7
    assert (root / "Cora" / "processed").is_dir() and _leftovers(root) == []


def test_interrupted_pyg_download_leaves_nothing(tmp_path, monkeypatch):
    from torch_geometric.datasets import Planetoid

    root = tmp_path / "data"
    root.mkdir()
    with _Server({"ind.cora.x": b"x" * 1000}) as server:  # the other files: 404
        monkeypatch.setattr(Planetoid, "url", f"{server.url}/planetoid")
        with pytest.raises(DatasetNotFoundError) as err:
            load_dataset("cora", str(root))
    assert "without a network" in str(err.value) and "Cora" in str(err.value)
    assert os.listdir(root) == []


_LOAD_ARXIV = """
import sys
from wavygraph.data import load_dataset
data, info = load_dataset("ogbn-arxiv", sys.argv[1])
print(data.num_nodes, int(data.x.sum().round()), int(data.test_mask.sum()))
"""


@pytest.mark.slow
def test_two_processes_download_the_same_set_once(tmp_path, arxiv_zip, ogb_root):
    """Two processes on one fresh root: the first downloads and processes under the
    data set's lock, the second waits and reads the finished folder."""
    import subprocess
    import sys

    root = tmp_path / "data"
    repo = Path(__file__).resolve().parents[2]
    with _Server({"arxiv.zip": arxiv_zip}) as server:
        env = dict(os.environ, http_proxy=server.url, HTTP_PROXY=server.url, no_proxy="", NO_PROXY="",
                   OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]))
        procs = [subprocess.Popen([sys.executable, "-c", _LOAD_ARXIV, str(root)], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    assert server.requests == [ARXIV_URL]  # downloaded once: the second process found it in place
    direct, _ = load_dataset("ogbn-arxiv", str(ogb_root))
    expected = f"{direct.num_nodes} {int(direct.x.sum().round())} {int(direct.test_mask.sum())}"
    assert [out.strip().splitlines()[-1] for out, _ in results] == [expected, expected]
    assert _leftovers(root) == [] and (root / "ogbn_arxiv" / "processed" / "geometric_data_processed.pt").exists()
