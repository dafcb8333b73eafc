"""Float rounding of the reversible ``leapfrog`` stack: the input embedding
rebuilt from the last state by undoing every step, against the true one,
``max |X_0 rebuilt - X_0| / max |X_0|`` (:func:`wavygraph.nn.reversible.reconstruction_error`),
at several depths, for a freshly initialised model on the CSBM ``small`` graph
(2,000 nodes, hidden 64, the Cora recipe's model options) in float32 and float64.

    python -m benchmarks.reversible_error --layers 64 256 1000
    python -m benchmarks.reversible_error --set tau=0.5 local=sep value_proj=true ffn=true norm=batch shared_attention=false

``--set`` replaces or adds ``WavyDIFFormer`` options (``name=value``, the
value read as YAML): the second line is ``configs/minesweeper_reversible.yaml``'s
model. Each model is initialised with ``torch.manual_seed(seed)``; prints one line a depth.
"""
from __future__ import annotations

import argparse

import torch
import yaml

from wavygraph.data.csbm import load_csbm
from wavygraph.nn import WavyDIFFormer, gcn_adjacency
from wavygraph.nn.reversible import reconstruction_error

#: ``configs/cora_recipe.yaml``'s model options (the residual kind aside)
RECIPE = dict(graph_weight=0.8, tau=1.0, value_proj=False, dropout_at="force", source=True, source_weight=0.25,
              shared_attention=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[64, 256, 1000])
    ap.add_argument("--num-nodes", type=int, default=2000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE", help="further WavyDIFFormer options")
    args = ap.parse_args(argv)
    options = dict(RECIPE)
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or not name:
            ap.error(f"--set takes name=value, got {item!r}")
        options[name] = yaml.safe_load(value)
    torch.set_num_threads(1)
    data, info = load_csbm(preset="small", num_nodes=args.num_nodes)
    print(f"csbm small, {data.num_nodes} nodes, hidden {args.hidden}, leapfrog with {options}")
    for layers in args.layers:
        errors = []
        for dtype in (torch.float32, torch.float64):
            torch.manual_seed(args.seed)
            model = WavyDIFFormer(data.num_features, args.hidden, info.num_outputs, num_layers=layers,
                                  residual="leapfrog", **options).to(dtype)
            x = data.x.to(dtype)
            errors.append(reconstruction_error(model, x, gcn_adjacency(data.edge_index, data.num_nodes, dtype)))
        print(f"layers {layers:5d}: relative reconstruction error float32 {errors[0]:.2e}, float64 {errors[1]:.2e}")


if __name__ == "__main__":
    main()
