"""Mixed precision (bf16 autocast), layers cast to bf16 / fp16, and
torch.compile of the model."""
import pytest
import torch
import torch.nn.functional as F

from wavygraph.nn import DIFFormerConv, WavyDIFFormer
from wavygraph.nn.functional import all_pair_attention
from wavygraph.nn.model_args import RECIPE_ARGS


def recipe(*sizes, **kw):
    """WavyDIFFormer with the depth recipe's settings (RECIPE_ARGS), the class defaults these tests were written for."""
    return WavyDIFFormer(*sizes, **{**RECIPE_ARGS, **kw})


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("use_graph", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_conv_bf16_autocast_close_to_float32(use_graph, batched):
    torch.manual_seed(0)
    conv = DIFFormerConv(16, heads=2, use_graph=use_graph)
    x = torch.randn(300, 16)
    ei = torch.randint(0, 300, (2, 1200))
    batch = torch.arange(300) % 3 if batched else None
    if batched:  # no edge across graphs
        ei = ei[:, batch[ei[0]] == batch[ei[1]]]
    ref = conv(x, ei, batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv(x, ei, batch)
    assert torch.isfinite(out).all()
    assert rel_err(out, ref) < 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel,qk_norm,value_proj", [
    ("simple", None, True),  # the folded fast path
    ("simple", "row", False),  # the functional path, values = x
    ("sigmoid", None, True),
])
@pytest.mark.parametrize("batched", [False, True])
def test_conv_cast_to_half_precision(dtype, kernel, qk_norm, value_proj, batched):
    """A conv cast to bf16 / fp16 (no autocast) runs on CPU, local branch
    included (the sparse product has no half-precision kernel there): finite
    output and gradients in the cast dtype, close to the float32 layer."""
    torch.manual_seed(0)
    ref_conv = DIFFormerConv(16, heads=2, kernel=kernel, qk_norm=qk_norm, value_proj=value_proj)
    conv = DIFFormerConv(16, heads=2, kernel=kernel, qk_norm=qk_norm, value_proj=value_proj).to(dtype)
    conv.load_state_dict(ref_conv.state_dict())
    x = torch.randn(300, 16)
    ei = torch.randint(0, 300, (2, 1200))
    batch = torch.arange(300) % 3 if batched else None
    if batched:  # no edge across graphs
        ei = ei[:, batch[ei[0]] == batch[ei[1]]]
    xh = x.to(dtype).requires_grad_()
    out = conv(xh, ei, batch)
    out.float().square().mean().backward()
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert torch.isfinite(xh.grad).all() and all(torch.isfinite(p.grad).all() for p in conv.parameters())
    ref = ref_conv(x, ei, batch)
    ref.square().mean().backward()
    tol = 2e-2 if dtype == torch.bfloat16 else 3e-3  # a few roundings of 8 (bf16) / 11 (fp16) bits
    assert rel_err(out, ref) < tol
    # the q/k weight gradients sum terms that largely cancel: a looser bound, still far below a wrong formula's O(1)
    assert rel_err(conv.qkv.weight.grad, ref_conv.qkv.weight.grad) < 0.1


def test_functional_bf16_inputs_close():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(500, 2, 8, generator=g) for _ in range(3))
    ref = all_pair_attention(q, k, v)
    out = all_pair_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert rel_err(out, ref) < 1e-2


def test_model_bf16_autocast_training_step():
    torch.manual_seed(0)
    model = recipe(8, 16, 3, num_layers=3, residual="light_wave", dropout=0.0)  # the same function twice
    x = torch.randn(200, 8)
    ei = torch.randint(0, 200, (2, 800))
    ref = model(x, ei)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x, ei)
        loss = F.cross_entropy(out.float(), torch.randint(0, 3, (200,)))
    loss.backward()
    assert rel_err(out, ref) < 2e-2  # a few roundings of 8 bits, as above
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_torch_compile_matches_eager():
    if not hasattr(torch, "compile"):
        pytest.skip("torch.compile unavailable")
    torch.manual_seed(0)
    model = recipe(6, 8, 3, num_layers=2, residual="wave", dropout=0.0)  # the same function twice
    x = torch.randn(50, 6)
    ei = torch.randint(0, 50, (2, 150))
    ref = model(x, ei)
    out = torch.compile(model, backend="aot_eager")(x, ei)  # aot_eager: no C++ toolchain needed
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    out.sum().backward()


@pytest.mark.parametrize("scale", [1e22, 1e30, 1e-25, 1e-30, 1.0])
@pytest.mark.parametrize("bias,value_proj,batched", [(True, True, False), (False, True, True), (False, False, False),
                                                     (True, False, True)])
def test_folded_float32_finite_and_right_at_extreme_scales(scale, bias, value_proj, batched):
    """The folded fast path in float32 on inputs whose squares over- or
    underflow float32 (a Gram matrix of x itself would be inf or 0): output
    and gradients equal all_pair_attention on the same q, k, v, both within
    float32 rounding of the float64 result."""
    torch.manual_seed(1)
    conv = DIFFormerConv(6, heads=2, use_graph=False, value_proj=value_proj, bias=bias)
    batch = torch.tensor([0] * 7 + [2] * 5 + [3] * 3)[torch.randperm(15)] if batched else None  # graph 1 empty
    x = (torch.randn(15, 6, dtype=torch.float64) * scale).float()
    w = torch.randn(15, 6)

    def run(conv, x, folded):
        x = x.clone().requires_grad_()
        if folded:
            out = conv(x, batch=batch)
        else:
            q, k, v = conv.project(x)
            out = all_pair_attention(q, k, v, batch).mean(1)
        return out, torch.autograd.grad((out * w.to(out.dtype)).sum(), (x, conv.qkv.weight))

    out, (gx, gw) = run(conv, x, True)
    ref, (rgx, rgw) = run(conv, x, False)
    truth, (tgx, tgw) = run(conv.double(), x.double(), False)
    assert torch.isfinite(out).all() and torch.isfinite(gx).all() and torch.isfinite(gw).all()
    for got, base, exact in ((out, ref, truth), (gx, rgx, tgx), (gw, rgw, tgw)):
        size = exact.abs().max().item()
        if size < 1e-30:  # values under float32's normal range (the weight gradient at 1e-25): 0 on both paths
            continue
        assert (base.double() - exact).abs().max().item() < 1e-4 * size  # all_pair_attention is right here
        assert (got.double() - exact).abs().max().item() < 1e-4 * size
