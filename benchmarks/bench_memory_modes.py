"""Peak memory and time of one training step (forward, loss, backward) of
``WavyDIFFormer`` in its memory modes: plain (every layer's tensors stored),
gradient checkpointing with ``checkpoint_segments`` segments (``L``: every
layer; ``None``: the default ``ceil(sqrt(L))``) and, for ``leapfrog``,
``reversible=True``; at several depths, on a random graph (``--nodes``,
average degree 10, 128 features, 40 classes, hidden ``--hidden``, the Cora
recipe's model options, dropout 0.2).

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` above the baseline
(model, optimiser state and graph already allocated), in this process; on CPU
the resident high-water mark above the baseline, one fresh subprocess per
configuration, with glibc's ``MALLOC_MMAP_THRESHOLD_=131072`` so that freed
large tensors go back to the system (else the warm-up's cached pages hide
the peak). Seconds: the median of ``--reps`` steps after a warm-up.

    python -m benchmarks.bench_memory_modes --device cuda --nodes 100000 --layers 16 64
    python -m benchmarks.bench_memory_modes --nodes 20000 --layers 16 --reps 1
    python -m benchmarks.bench_memory_modes --device cuda --kinds leapfrog --layers 1000 --modes reversible
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

from benchmarks._common import fmt_mb, in_subprocess, machine_line, sync, warm_peak

RECIPE = dict(graph_weight=0.8, tau=1.0, value_proj=False, dropout_at="force", source=True, source_weight=0.25,
              shared_attention=True, dropout=0.2, residual_options=None)


def _graph(nodes: int, device: str):
    from wavygraph.nn import gcn_adjacency

    g = torch.Generator().manual_seed(0)
    src, dst = torch.randint(0, nodes, (2, 5 * nodes), generator=g)
    edges = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1)
    x = torch.randn(nodes, 128, generator=g)
    y = torch.randint(0, 40, (nodes,), generator=g)
    return x.to(device), gcn_adjacency(edges, nodes).to(device), y.to(device)


def _modes(kind: str, layers: int) -> dict:
    modes = {"plain": {}, "ckpt_every_layer": dict(gradient_checkpointing=True, checkpoint_segments=layers),
             "ckpt_sqrt": dict(gradient_checkpointing=True)}
    if kind == "leapfrog":
        modes["reversible"] = dict(reversible=True)
    return modes


def measure(kind: str, layers: int, mode: str, nodes: int, hidden: int, device: str, reps: int) -> dict:
    """Peak bytes and median seconds of one training step of one configuration."""
    from wavygraph.nn import WavyDIFFormer

    torch.manual_seed(0)
    x, adj, y = _graph(nodes, device)
    model = WavyDIFFormer(128, hidden, 40, num_layers=layers, residual=kind, **RECIPE,
                          **_modes(kind, layers)[mode]).to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x, adj), y).backward()
        opt.step()

    peak = warm_peak(step, device)
    times = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t)
    return {"peak": peak, "seconds": statistics.median(times)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", nargs="+", default=["light_wave", "leapfrog"])
    ap.add_argument("--layers", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=None, help="a subset of: plain ckpt_every_layer ckpt_sqrt reversible")
    ap.add_argument("--one", nargs=3, metavar=("KIND", "LAYERS", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:  # a CPU subprocess: one configuration, JSON on the last line
        kind, layers, mode = args.one
        print(json.dumps(measure(kind, int(layers), mode, args.nodes, args.hidden, args.device, args.reps)))
        return
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")  # for the CPU subprocesses (see above)
    print(machine_line(args.device), f"| {args.nodes} nodes, hidden {args.hidden}")
    print("| kind | layers | mode | peak MB | s / step |\n|---|---:|---|---:|---:|")
    for kind in args.kinds:
        for layers in args.layers:
            for mode in [m for m in _modes(kind, layers) if args.modes is None or m in args.modes]:
                if args.device.startswith("cuda"):
                    r = measure(kind, layers, mode, args.nodes, args.hidden, args.device, args.reps)
                    torch.cuda.empty_cache()
                else:
                    r = in_subprocess("benchmarks.bench_memory_modes",
                                      ["--one", kind, str(layers), mode, "--nodes", str(args.nodes),
                                       "--hidden", str(args.hidden), "--reps", str(args.reps)])
                print(f"| {kind} | {layers} | {mode} | {fmt_mb(r['peak'])} | {r['seconds']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
