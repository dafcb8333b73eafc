"""The CUDA paths against the CPU in float64 (the CPU paths are checked
against dense references elsewhere). Skipped without a GPU."""
import pytest
import torch
import torch.nn.functional as F

from wavygraph.nn import DIFFormerConv, WavyDIFFormer
from wavygraph.nn.model import DIFFORMER_ARGS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEV = "cuda"


@pytest.fixture(autouse=True)
def no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def rel(a, b):
    """||a - b|| / ||b||; the absolute error where b is exactly 0 (the first
    light_wave layer's lam gets no gradient: its displacement starts at 0)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    scale = b.norm().item()
    return (a - b).norm().item() / (scale if scale > 0 else 1.0)


def graph(n=2000, f=16, m=8000, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, f, generator=g), torch.randint(0, n, (2, m), generator=g)


@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("value_proj", [True, False])
def test_conv_cuda_forward_backward_equal_cpu_float64(kernel, heads, batched, value_proj):
    torch.manual_seed(0)
    x, ei = graph()
    batch = (torch.arange(x.shape[0]) * 5 // x.shape[0]) if batched else None
    conv = DIFFormerConv(16, heads=heads, kernel=kernel, use_graph=True, value_proj=value_proj)
    ref_conv = DIFFormerConv(16, heads=heads, kernel=kernel, use_graph=True, value_proj=value_proj).double()
    ref_conv.load_state_dict(conv.state_dict())
    xr = x.double().requires_grad_()
    ref = ref_conv(xr, ei, batch)
    ref.pow(2).sum().backward()
    conv = conv.to(DEV)
    xc = x.to(DEV).requires_grad_()
    out = conv(xc, ei.to(DEV), None if batch is None else batch.to(DEV))
    out.pow(2).sum().backward()
    assert rel(out, ref) < 1e-5
    assert rel(xc.grad, xr.grad) < 1e-4
    for (name, p), (_, q) in zip(conv.named_parameters(), ref_conv.named_parameters()):
        assert rel(p.grad, q.grad) < 1e-4, name


def test_conv_forward_backward_without_host_sync():
    """One graph, simple kernel: no host-device synchronisation in forward or backward."""
    torch.manual_seed(0)
    x, ei = graph()
    conv = DIFFormerConv(16, heads=2, use_graph=True).to(DEV)
    from wavygraph.nn.graph import gcn_adjacency

    adj = gcn_adjacency(ei.to(DEV), x.shape[0])  # built once, as a training loop does
    xc = x.to(DEV).requires_grad_()
    conv(xc, adj).sum().backward()  # warm-up (lazy init)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = conv(xc, adj)
        out.sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(out).all()


def test_conv_bf16_autocast_cuda_close_to_float32():
    torch.manual_seed(0)
    x, ei = graph()
    conv = DIFFormerConv(16, heads=2, use_graph=True).to(DEV)
    x, ei = x.to(DEV), ei.to(DEV)
    ref = conv(x, ei)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = conv(x, ei)
    assert torch.isfinite(out).all()
    assert rel(out, ref) < 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
def test_conv_cast_to_half_precision_cuda(dtype, kernel):
    """A conv cast to bf16 / fp16 on the GPU: finite output and gradients,
    close to the float32 layer."""
    torch.manual_seed(0)
    x, ei = graph()
    ref_conv = DIFFormerConv(16, heads=2, kernel=kernel, use_graph=True).to(DEV)
    conv = DIFFormerConv(16, heads=2, kernel=kernel, use_graph=True).to(DEV, dtype)
    conv.load_state_dict(ref_conv.state_dict())
    x, ei = x.to(DEV), ei.to(DEV)
    xh = x.to(dtype).requires_grad_()
    out = conv(xh, ei)
    out.float().square().mean().backward()
    assert out.dtype == dtype and torch.isfinite(out).all() and torch.isfinite(xh.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in conv.parameters())
    assert rel(out, ref_conv(x, ei)) < (2e-2 if dtype == torch.bfloat16 else 3e-3)


@pytest.mark.parametrize("residual", ["diffusion", "wave", "mix", "light_wave"])
def test_model_training_step_cuda_compiled_step_equals_cpu(residual):
    """WavyDIFFormer on CUDA with the compiled (Triton) step + LayerNorm
    against the eager CPU model in float64: outputs and every gradient."""
    torch.manual_seed(0)
    x, ei = graph(f=8)
    y = torch.randint(0, 3, (x.shape[0],))
    kw = dict(DIFFORMER_ARGS, num_layers=4, residual=residual)  # no dropout, no source: the fused step runs
    cpu = WavyDIFFormer(8, 16, 3, step_impl="eager", **kw).double()
    gpu = WavyDIFFormer(8, 16, 3, step_impl="compile", **kw)
    gpu.load_state_dict({k: v.float() for k, v in cpu.state_dict().items()})
    gpu = gpu.to(DEV)
    ref = cpu(x.double(), ei)
    F.cross_entropy(ref, y).backward()
    out = gpu(x.to(DEV), ei.to(DEV))
    F.cross_entropy(out, y.to(DEV)).backward()
    assert rel(out, ref) < 1e-5
    for (name, p), (_, q) in zip(gpu.named_parameters(), cpu.named_parameters()):
        assert rel(p.grad, q.grad) < 1e-3, name


def test_train_cli_on_cuda(tmp_path):
    from wavygraph.cli import main

    out = tmp_path / "run"
    rc = main(["train", "data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=600", "model.num_layers=4",
               "model.residual=wave", "train.epochs=5", "train.device=cuda", "train.progress=false",
               f"out_dir={out}"])
    assert rc in (0, None)
    assert (out / "metrics.json").exists()
