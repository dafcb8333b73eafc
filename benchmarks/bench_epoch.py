"""One full-batch training epoch on an ogbn-arxiv-size synthetic graph
(CSBM preset ``arxiv``: 169,343 nodes, about 1.2M edges, 128 features,
40 classes): WavyDIFFormer with every residual kind against PyG's
``SGFormer`` model at equal depth and width.

An epoch is: forward on the whole graph, cross-entropy on the training
nodes, backward, one Adam step. The defaults are ``configs/arxiv.yaml``'s
model (the paper's arxiv row: 7 layers, hidden 256, one head, dropout 0.5);
``--hidden 64`` is the narrower model of earlier tables. Times: same
process, the models called in turn, the order reversed every repetition
(a b, b a, ...); seconds are the median of ``--reps``, ratios the median of
the per-repetition ratios (each pair ran back to back). Peak memory: on CPU one epoch in a fresh
subprocess per model (resident high-water mark above the baseline); on CUDA
``torch.cuda.max_memory_allocated`` above the baseline, in this process.

    python -m benchmarks.bench_epoch --reps 5
    python -m benchmarks.bench_epoch --residuals diffusion light_wave --no-memory
    python -m benchmarks.bench_epoch --residuals diffusion light_wave --no-sgformer --compile
    python -m benchmarks.bench_epoch --residuals diffusion light_wave --step-impl eager compile --no-sgformer

``--step-impl`` picks how each layer's residual step and joint LayerNorm run
(``WavyDIFFormer(step_impl=...)``: ``eager`` or ``compile``); with
several, every residual kind runs with each, and the overheads are printed
against diffusion with the same step and against diffusion with eager ops
(DIFFormer's own). A compiling epoch is the warm-up, not timed.
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

from wavygraph.nn.steppers import STEPPERS
from wavygraph.nn.steppers.compiled import STEP_IMPLS

from benchmarks._common import (fmt_mb, in_subprocess, machine_line, medians, paired_ratios, rep_ratios, time_reps,
                               warm_peak)



def load_graph(num_nodes: int | None, device: str):
    from wavygraph.data.csbm import load_csbm

    data, _ = load_csbm(split=0, preset="arxiv", seed=0, num_nodes=num_nodes)
    return data.to(device)


def build(impl: str, data, args, step_impl: str = "eager"):
    from torch_geometric.nn.models import SGFormer

    from wavygraph.nn import WavyDIFFormer
    from wavygraph.nn.graph import gcn_adjacency
    from wavygraph.nn.model import DIFFORMER_ARGS

    torch.manual_seed(0)
    f, c = data.num_features, int(data.y.max()) + 1
    if impl == "sgformer":
        model = SGFormer(f, args.hidden, c, trans_num_layers=args.layers, trans_num_heads=args.heads,
                         trans_dropout=args.dropout, gnn_num_layers=args.layers, gnn_dropout=args.dropout)
        graph = data.edge_index
        one = torch.zeros(data.num_nodes, dtype=torch.long, device=data.x.device)  # one graph

        def forward():
            return model(data.x, graph, one)
    else:
        kw = {**DIFFORMER_ARGS, "dropout": args.dropout}  # DIFFormer's layer, as the tables were measured
        model = WavyDIFFormer(f, args.hidden, c, num_layers=args.layers, residual=impl, heads=args.heads,
                              use_graph=True, step_impl=step_impl, **kw)
        graph = gcn_adjacency(data.edge_index, data.num_nodes)  # built once, as a training loop does
        run = torch.compile(model) if args.compile else model

        def forward():
            return run(data.x, graph)
    model = model.to(data.x.device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    mask = data.train_mask

    def epoch():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward()[mask], data.y[mask])
        loss.backward()
        opt.step()

    return epoch


def child(args) -> None:
    data = load_graph(args.num_nodes, args.device)
    print(json.dumps({"peak": warm_peak(build(args.impl, data, args, args.step_impl[0]), args.device)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--residuals", nargs="+", default=list(STEPPERS), choices=list(STEPPERS),
                    help="registered residual kinds (diffusion first: the overheads are against it)")
    ap.add_argument("--no-sgformer", action="store_true")
    ap.add_argument("--layers", type=int, default=7)
    ap.add_argument("--hidden", type=int, default=256, help="width (default: configs/arxiv.yaml's 256)")
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--num-nodes", type=int, default=None, help="override the preset's 169,343")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the WavyDIFFormer models (default backend); the first, compiling "
                         "epoch is the warm-up and not timed")
    ap.add_argument("--step-impl", nargs="+", default=["eager"], choices=STEP_IMPLS,
                    help="WavyDIFFormer's step_impl; several: each residual kind with each (default: eager)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        return child(args)

    data = load_graph(args.num_nodes, args.device)
    steps = list(dict.fromkeys(args.step_impl))
    # (label, model, step_impl); the label names the step only when there are several
    runs = [(r if len(steps) == 1 else f"{r}/{s}", r, s) for s in steps for r in args.residuals]
    runs += [] if args.no_sgformer else [("sgformer", "sgformer", steps[0])]
    impls = [label for label, _, _ in runs]
    print(f"# bench_epoch: csbm 'arxiv' N={data.num_nodes}, E={data.edge_index.shape[1]}, F={data.num_features}, "
          f"{args.layers} layers, hidden {args.hidden}, heads {args.heads}, dropout {args.dropout}, "
          f"step_impl {'/'.join(steps)}, "
          f"{'torch.compile, ' if args.compile else ''}"
          f"{machine_line(args.device)}, device {args.device}, median of {args.reps}")
    fns = {label: build(model, data, args, step) for label, model, step in runs}
    reps = time_reps(fns, args.reps, args.device)
    del fns
    times = medians(reps)
    mem = {}
    if not args.no_memory:
        for i, model, step in runs:
            if args.device.startswith("cuda"):  # the allocator's own peak: exact in this process
                mem[i] = warm_peak(build(model, data, args, step), args.device)
                continue
            extra = ["--threads", str(args.threads)] if args.threads else []
            if args.num_nodes:
                extra += ["--num-nodes", str(args.num_nodes)]
            mem[i] = in_subprocess("benchmarks.bench_epoch", [
                "--child", "--impl", model, "--step-impl", step, "--layers", str(args.layers), "--hidden", str(args.hidden),
                "--heads", str(args.heads), "--dropout", str(args.dropout), "--device", args.device, *extra,
                *(["--compile"] if args.compile else [])])["peak"]
    base = impls[0]
    ratio = paired_ratios(reps, base)
    print(f"| model | s/epoch | time / {base} | peak MB | mem / {base} |")
    print("|---|---|---|---|---|")
    for i in impls:
        name = f"WavyDIFFormer {i}" if i != "sgformer" else "PyG SGFormer"
        m = f"{fmt_mb(mem[i])} | {mem[i] / mem[base]:.2f}x" if i in mem else "- | -"
        print(f"| {name} | {times[i]:.4g} | {ratio[i]:.3f}x | {m} |")
    for label, model, step in runs:
        bases = [f"diffusion/{step}" if len(steps) > 1 else "diffusion"]
        if len(steps) > 1 and "eager" in steps and step != "eager":
            bases.append("diffusion/eager")
        for b in bases:
            if label != b and b in times:
                per_rep = rep_ratios(reps, label, b)
                print(f"# {label} overhead vs {b}: {100 * (statistics.median(per_rep) - 1):+.1f}% time "
                      f"(median of {len(per_rep)} paired ratios; range {100 * (per_rep[0] - 1):+.1f}% "
                      f"to {100 * (per_rep[-1] - 1):+.1f}%)")


if __name__ == "__main__":
    main()
