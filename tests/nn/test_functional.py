import math

import pytest
import torch

from wavygraph.nn.functional import all_pair_attention


def dense_reference(q, k, v, kernel, qk_norm):
    """Exact N x N attention with explicit per-head loops."""
    n, h, _ = q.shape
    if qk_norm is None:  # each kernel's own: DIFFormer-s normalises, DIFFormer-a does not
        qk_norm = "global" if kernel == "simple" else "none"
    if qk_norm == "global":
        q = q / q.norm()
        k = k / k.norm()
    elif qk_norm == "row":
        q = q / q.norm(dim=-1, keepdim=True)
        k = k / k.norm(dim=-1, keepdim=True)
    out = []
    for head in range(h):
        s = q[:, head] @ k[:, head].T  # (N, N)
        w = 1.0 + s if kernel == "simple" else torch.sigmoid(s)
        a = w / w.sum(dim=1, keepdim=True)
        out.append(a @ v[:, head])
    return torch.stack(out, dim=1)


def rand_qkv(n, h=3, d=5, dv=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, h, d, generator=g, dtype=dtype)
    k = torch.randn(n, h, d, generator=g, dtype=dtype)
    v = torch.randn(n, h, dv, generator=g, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
@pytest.mark.parametrize("qk_norm", ["global", "row"])
@pytest.mark.parametrize("heads", [1, 3])
def test_matches_dense_reference(kernel, qk_norm, heads):
    q, k, v = rand_qkv(37, h=heads, d=6, dv=4)
    out = all_pair_attention(q, k, v, kernel=kernel, qk_norm=qk_norm)
    ref = dense_reference(q, k, v, kernel, qk_norm)
    assert out.shape == (37, heads, 4)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-10)


def test_sigmoid_without_norm_matches_reference():
    q, k, v = rand_qkv(20)
    out = all_pair_attention(q, k, v, kernel="sigmoid", qk_norm="none")
    torch.testing.assert_close(out, dense_reference(q, k, v, "sigmoid", "none"), rtol=0, atol=1e-10)


def test_sigmoid_default_is_difformer_a_on_raw_projections():
    """kernel='sigmoid' with the default qk_norm: weights sigmoid(q_i . k_j)
    of the raw q, k (no normalisation, no softmax), divided by their row sum."""
    q, k, v = rand_qkv(23, h=2, d=4, dv=3, seed=5)
    out = all_pair_attention(q, k, v, kernel="sigmoid")
    ref = torch.empty(23, 2, 3, dtype=torch.float64)
    for h in range(2):
        for i in range(23):
            w = torch.tensor([1.0 / (1.0 + math.exp(-float(q[i, h] @ k[j, h]))) for j in range(23)], dtype=torch.float64)
            ref[i, h] = (w / w.sum()) @ v[:, h]
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    # the globally normalised variant is a different, nearly uniform attention
    assert (all_pair_attention(q, k, v, kernel="sigmoid", qk_norm="global") - ref).abs().max() > 1e-2


@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
def test_value_shared_by_heads(kernel):
    """v of shape (N, 1, Dv) is every head's value (DIFFormer without value projection)."""
    q, k, v = rand_qkv(15, h=3, dv=4)
    shared = v[:, :1]
    batch = torch.tensor([0, 1] * 7 + [1])
    for b in (None, batch):
        out = all_pair_attention(q, k, shared, batch=b, kernel=kernel)
        ref = all_pair_attention(q, k, shared.expand(15, 3, 4).contiguous(), batch=b, kernel=kernel)
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(
        all_pair_attention(q, k, shared, kernel=kernel), dense_reference(q, k, shared.expand(15, 3, 4), kernel, None),
        rtol=0, atol=1e-10,
    )
    with pytest.raises(ValueError, match=r"v must have shape \(N, H, Dv\) or \(N, 1, Dv\)"):
        all_pair_attention(q, k, v[:, :2], kernel=kernel)


def test_reference_is_sensitive():
    # The comparison above would notice a wrong formula: the two kernels and
    # the two norms give clearly different outputs on the same input.
    q, k, v = rand_qkv(30)
    a = all_pair_attention(q, k, v, kernel="simple", qk_norm="global")
    b = all_pair_attention(q, k, v, kernel="simple", qk_norm="row")
    c = all_pair_attention(q, k, v, kernel="sigmoid", qk_norm="global")
    assert (a - b).abs().max() > 1e-4 and (a - c).abs().max() > 1e-4


def test_sigmoid_row_blocks_match_single_block():
    q, k, v = rand_qkv(50)
    full = all_pair_attention(q, k, v, kernel="sigmoid")
    # a budget of a few rows forces many blocks (and checkpointing with grad)
    q.requires_grad_(True)
    blocked = all_pair_attention(q, k, v, kernel="sigmoid", max_block_bytes=3 * 3 * 50 * 8 * 7)
    torch.testing.assert_close(blocked, full, rtol=0, atol=1e-12)
    blocked.sum().backward()
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
@pytest.mark.parametrize("qk_norm", ["global", "row"])
def test_gradcheck(kernel, qk_norm):
    q, k, v = rand_qkv(9, h=2, d=3, dv=2)
    for t in (q, k, v):
        t.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: all_pair_attention(a, b, c, kernel=kernel, qk_norm=qk_norm), (q, k, v)
    )


@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
def test_gradcheck_batched(kernel):
    q, k, v = rand_qkv(10, h=2, d=3, dv=2)
    batch = torch.tensor([1, 0, 1, 1, 0, 2, 2, 1, 0, 1])
    for t in (q, k, v):
        t.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: all_pair_attention(a, b, c, batch=batch, kernel=kernel), (q, k, v)
    )


@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
@pytest.mark.parametrize("qk_norm", ["global", "row", None])
def test_batch_equals_each_graph_alone(kernel, qk_norm):
    sizes = [1, 2, 7, 300]
    q, k, v = rand_qkv(sum(sizes), h=2, d=4, dv=3, seed=1)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    perm = torch.randperm(batch.numel(), generator=torch.Generator().manual_seed(3))
    out = all_pair_attention(q[perm], k[perm], v[perm], batch=batch[perm], kernel=kernel, qk_norm=qk_norm)
    out_orig = torch.empty_like(out)
    out_orig[perm] = out
    start = 0
    for size in sizes:
        sl = slice(start, start + size)
        alone = all_pair_attention(q[sl], k[sl], v[sl], kernel=kernel, qk_norm=qk_norm)
        torch.testing.assert_close(out_orig[sl], alone, rtol=0, atol=1e-12)
        torch.testing.assert_close(alone, dense_reference(q[sl], k[sl], v[sl], kernel, qk_norm), rtol=0, atol=1e-10)
        start += size


def test_batch_keeps_graphs_apart():
    q, k, v = rand_qkv(20)
    batch = torch.tensor([0] * 10 + [1] * 10)
    out = all_pair_attention(q, k, v, batch=batch)
    joint = all_pair_attention(q, k, v)
    assert (out - joint).abs().max() > 1e-3


def test_empty_graph_ids_and_empty_input():
    q, k, v = rand_qkv(6)
    batch = torch.tensor([0, 0, 3, 3, 3, 0])  # graphs 1 and 2 are empty
    out = all_pair_attention(q, k, v, batch=batch)
    torch.testing.assert_close(out[[2, 3, 4]], all_pair_attention(q[2:5], k[2:5], v[2:5]))
    empty = all_pair_attention(q[:0], k[:0], v[:0])
    assert empty.shape == (0, 3, 4)


def test_errors_name_the_problem():
    q, k, v = rand_qkv(5)
    with pytest.raises(ValueError, match="unknown kernel 'dot'.*'simple', 'sigmoid'"):
        all_pair_attention(q, k, v, kernel="dot")
    with pytest.raises(ValueError, match="qk_norm"):
        all_pair_attention(q, k, v, qk_norm="none")
    with pytest.raises(ValueError, match="q and k must have the same shape"):
        all_pair_attention(q, k[:, :, :2], v)
    with pytest.raises(ValueError, match=r"batch must have shape \(5,\), one graph index per node"):
        all_pair_attention(q, k, v, batch=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        all_pair_attention(q, k, v, batch=torch.zeros(5))


def test_simple_kernel_memory_is_linear():
    """N = 200,000, D = 64: forward and backward never allocate N x N.

    An N x N float32 matrix would take 160 GB, more than this machine has;
    the profiler's largest single allocation must stay O(N d).
    """
    n, d = 200_000, 64
    q = torch.randn(n, 1, d, requires_grad=True)
    k = torch.randn(n, 1, d, requires_grad=True)
    v = torch.randn(n, 1, d, requires_grad=True)
    with torch.profiler.profile(profile_memory=True, record_shapes=False) as prof:
        out = all_pair_attention(q, k, v)
        out.square().mean().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(v.grad).all()
    largest = max((abs(e.cpu_memory_usage) for e in prof.events()), default=0)
    assert largest <= 4 * n * d * 4, largest  # a few (N, d) float32 buffers at most
