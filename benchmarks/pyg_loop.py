"""WavyDIFFormer with the depth recipe (``RECIPE_ARGS``, its defaults when
this was first measured) in the usual PyG training loop, side by side with
PyG's ``GCN`` in the same loop: does the recipe serve a user who writes the
usual PyG training loop?

The loop is the one a PyG user writes first: Cora (Planetoid public split,
``NormalizeFeatures``; downloaded by PyG into ``--root`` when missing),
``RandomNodeLoader`` with 4 parts, Adam (lr 5e-3), cross-entropy on the
training nodes of each part, 60 epochs; after every epoch the whole graph is
evaluated and the test accuracy at the best validation epoch is kept; seeds 0
and 1, hidden 64. Every model is built with its constructor's defaults apart
from the sizes (and, for WavyDIFFormer, ``RECIPE_ARGS``, ``num_layers`` and ``residual``):

    WavyDIFFormer(in, hidden, out, num_layers=L, residual=k, **RECIPE_ARGS)  # L = 4 and 16, every built-in kind
    GCN(in, hidden, num_layers=2, out_channels=out)      # PyG's, dropout 0 by default

    python -m benchmarks.pyg_loop --root DIR              # DIR/Cora/raw/ind.cora.*
    python -m benchmarks.pyg_loop --root DIR --seeds 0 1 2 3 4 --num-layers 2 4 8
    python -m benchmarks.pyg_loop --root DIR --set dropout=0.5 value_proj=false   # other keyword arguments

Prints one line per model: the best validation accuracy and the test
accuracy at that epoch (mean +- std over the seeds), and the test gap to the
GCN.
"""
from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
import yaml

from wavygraph.nn import WavyDIFFormer
from wavygraph.nn.model_args import RECIPE_ARGS


def load_cora(root: str):
    """Cora's public split with row-normalised features: wavygraph's loader (PyG's ``Planetoid`` with
    ``NormalizeFeatures``, the same tensors), which downloads missing files and raises a one-line error."""
    from wavygraph.data import load_dataset

    return load_dataset("cora", root, 0, True)[0]


def train_once(make_model, data, seed: int, epochs: int, lr: float, num_parts: int) -> tuple[float, float]:
    """The best validation accuracy of one run and the test accuracy at that epoch (both %)."""
    from torch_geometric.loader import RandomNodeLoader

    torch.manual_seed(seed)
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loader = RandomNodeLoader(data, num_parts=num_parts, shuffle=True)
    best_val, best_test = -1.0, 0.0
    for _ in range(epochs):
        model.train()
        for batch in loader:
            if int(batch.train_mask.sum()) == 0:
                continue
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)
            F.cross_entropy(out[batch.train_mask], batch.y[batch.train_mask]).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(-1)
        val = float((pred[data.val_mask] == data.y[data.val_mask]).float().mean())
        test = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
        if val > best_val:
            best_val, best_test = val, test
    return 100 * best_val, 100 * best_test


def _summary(values: list[float]) -> str:
    mean = statistics.mean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:6.2f} +- {std:4.2f}"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="folder with Cora/raw/ind.cora.* (PyG's Planetoid layout)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--num-layers", type=int, nargs="+", default=[4, 16])
    p.add_argument("--residuals", nargs="+", default=["diffusion", "wave", "mix", "light_wave", "light_wave_joint"])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--epochs", type=int, default=60)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--num-parts", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-gcn", action="store_true", help="skip the GCN row (and the gap column)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="extra WavyDIFFormer keyword arguments (values parsed as YAML)")
    a = p.parse_args(argv)
    extra = {}
    for item in a.set:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--set {item!r}: expected KEY=VALUE, e.g. dropout=0.5")
        extra[key] = yaml.safe_load(value)
    torch.set_num_threads(a.threads)
    from torch_geometric.nn import GCN

    from wavygraph.data.errors import WavygraphDataError

    try:
        data = load_cora(a.root)
    except WavygraphDataError as exc:
        p.error(str(exc))
    c_in, c_out = data.num_features, int(data.y.max()) + 1
    models = {} if a.no_gcn else {"PyG GCN, 2 layers": lambda: GCN(c_in, a.hidden, num_layers=2, out_channels=c_out)}
    for L in a.num_layers:
        for k in a.residuals:
            kw = {**RECIPE_ARGS, **extra}
            make = lambda L=L, k=k, kw=kw: WavyDIFFormer(c_in, a.hidden, c_out, num_layers=L, residual=k, **kw)  # noqa: E731
            try:  # bad sizes, kinds or --set keys: one line, before any training
                make()
            except (TypeError, ValueError) as exc:
                p.error(f"WavyDIFFormer(num_layers={L}, residual={k!r}, {extra}): {exc}")
            models[f"WavyDIFFormer {k}, {L} layers"] = make
    print(f"Cora, RandomNodeLoader({a.num_parts} parts), Adam lr {a.lr}, {a.epochs} epochs, hidden {a.hidden}, "
          f"seeds {a.seeds}; best validation % and test % at that epoch"
          + (f"; WavyDIFFormer {extra}" if extra else ""), flush=True)
    base = None
    for name, make in models.items():
        runs = [train_once(make, data, s, a.epochs, a.lr, a.num_parts) for s in a.seeds]
        vals, tests = [v for v, _ in runs], [t for _, t in runs]
        gap = ""
        if not a.no_gcn:
            base = statistics.mean(tests) if base is None else base
            gap = f"   ({statistics.mean(tests) - base:+.2f} vs GCN)"
        print(f"{name:34s} val {_summary(vals)}   test {_summary(tests)}{gap}   "
              f"[test {' '.join('%.1f' % x for x in tests)}]", flush=True)


if __name__ == "__main__":
    main()
