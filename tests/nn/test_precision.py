"""Mixed precision (bf16 autocast) and torch.compile of the model."""
import pytest
import torch
import torch.nn.functional as F

from wavygraph.nn import DIFFormerConv, WavyDIFFormer
from wavygraph.nn.functional import all_pair_attention


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
    ref = conv(x, ei, batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv(x, ei, batch)
    assert torch.isfinite(out).all()
    assert rel_err(out, ref) < 1e-2


def test_functional_bf16_inputs_close():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(500, 2, 8, generator=g) for _ in range(3))
    ref = all_pair_attention(q, k, v)
    out = all_pair_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert rel_err(out, ref) < 1e-2


def test_model_bf16_autocast_training_step():
    torch.manual_seed(0)
    model = WavyDIFFormer(8, 16, 3, num_layers=3, residual="light_wave")
    x = torch.randn(200, 8)
    ei = torch.randint(0, 200, (2, 800))
    ref = model(x, ei)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x, ei)
        loss = F.cross_entropy(out.float(), torch.randint(0, 3, (200,)))
    loss.backward()
    assert rel_err(out, ref) < 1e-2
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_torch_compile_matches_eager():
    if not hasattr(torch, "compile"):
        pytest.skip("torch.compile unavailable")
    torch.manual_seed(0)
    model = WavyDIFFormer(6, 8, 3, num_layers=2, residual="wave")
    x = torch.randn(50, 6)
    ei = torch.randint(0, 50, (2, 150))
    ref = model(x, ei)
    try:
        compiled = torch.compile(model, backend="aot_eager")
        out = compiled(x, ei)
    except Exception as exc:  # no compiler toolchain in this environment
        pytest.skip(f"torch.compile unavailable: {type(exc).__name__}: {exc}")
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    out.sum().backward()
