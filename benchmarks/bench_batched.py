"""Many small graphs in one batch: wavygraph's no-padding batching against
the padded ``to_dense_batch`` layout PyG uses (SGFormer's global module).

Forward + backward of one attention layer (projections included), graph
branch off, same process, alternating, median of ``--reps``.

    python -m benchmarks.bench_batched --graphs 512 --min-nodes 10 --max-nodes 500
"""
from __future__ import annotations

import argparse

import torch
from torch_geometric.nn.attention import SGFormerAttention
from torch_geometric.utils import to_dense_batch

from benchmarks._common import machine_line, time_alternating
from wavygraph.nn import DIFFormerConv


def padded_difformer(conv: DIFFormerConv, x, batch):
    """The same DIFFormer-s layer computed on the padded (B, Nmax) layout."""
    xd, mask = to_dense_batch(x, batch)  # (B, M, C)
    b, m = mask.shape
    h, d = conv.heads, conv.head_channels
    q, k, v = conv.qkv(xd).view(b, m, 3, h, d).unbind(2)
    maskf = mask.view(b, m, 1, 1).to(x.dtype)
    q, k, v = q * maskf, k * maskf, v * maskf
    q = q / q.flatten(1).norm(dim=1).view(b, 1, 1, 1)
    k = k / k.flatten(1).norm(dim=1).view(b, 1, 1, 1)
    kv = torch.einsum("bmhd,bmhe->bhde", k, v)
    num = torch.einsum("bmhd,bhde->bmhe", q, kv) + v.sum(1, keepdim=True)
    den = torch.einsum("bmhd,bhd->bmh", q, k.sum(1)) + mask.sum(1).view(b, 1, 1)
    return (num / den.unsqueeze(-1)).mean(2)[mask]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", type=int, default=512)
    ap.add_argument("--min-nodes", type=int, default=10)
    ap.add_argument("--max-nodes", type=int, default=500)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = args.device
    torch.manual_seed(0)
    sizes = torch.randint(args.min_nodes, args.max_nodes + 1, (args.graphs,))
    batch = torch.repeat_interleave(torch.arange(args.graphs), sizes).to(dev)
    n, c, h = batch.numel(), args.channels, args.heads
    x = torch.randn(n, c, device=dev, requires_grad=True)
    conv = DIFFormerConv(c, heads=h, use_graph=False).to(dev)
    sg = SGFormerAttention(c, heads=h, head_channels=c).to(dev)

    with torch.no_grad():
        diff = (conv(x, batch=batch) - padded_difformer(conv, x, batch)).abs().max().item()

    def ours():
        conv(x, batch=batch).square().mean().backward()

    def padded_same_math():
        padded_difformer(conv, x, batch).square().mean().backward()

    def pyg_sgformer_padded():
        xd, mask = to_dense_batch(x, batch)
        sg(xd, mask)[mask].square().mean().backward()

    fns = {"wavygraph (no padding)": ours, "padded, same layer": padded_same_math,
           "PyG SGFormerAttention, padded": pyg_sgformer_padded}
    t = time_alternating(fns, args.reps, dev)
    base = t["wavygraph (no padding)"]
    print(f"# bench_batched: {args.graphs} graphs of {args.min_nodes}..{args.max_nodes} nodes "
          f"(N={n}, padded {args.graphs}x{int(sizes.max())}={args.graphs * int(sizes.max())}), C={c}, H={h}, "
          f"forward + backward, {machine_line(dev)}, device {dev}, median of {args.reps}")
    print(f"# max |ours - padded same layer| = {diff:.2e}")
    print("| method | s | time / wavygraph |")
    print("|---|---|---|")
    for name, s in t.items():
        print(f"| {name} | {s:.4g} | {s / base:.2f}x |")


if __name__ == "__main__":
    main()
