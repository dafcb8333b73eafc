"""``readout="mean"``: the output layer reads the mean of the layers' output
states. Checked against a literal transcription (the output layer applied to
the mean of ``return_hidden``'s states, float64), and every memory mode
against the plain one: outputs and every gradient, with dropout on, over
random depths, segment counts and batches of unequal, unsorted graphs."""
import pytest
import torch

from wavygraph.config import ConfigError, load_config
from wavygraph.nn import WavyDIFFormer
from wavygraph.nn.layer import norm_fn
from wavygraph.nn.validate import InputError


def _graph(seed: int, sizes: list[int], shuffle: bool):
    """Random graphs of the given sizes as one batch (nodes optionally
    shuffled, so the batch vector is unsorted), edges inside each graph."""
    g = torch.Generator().manual_seed(seed)
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    if shuffle:
        batch = batch[torch.randperm(len(batch), generator=g)]
    n = len(batch)
    src = torch.randint(0, n, (6 * n,), generator=g)
    dst = torch.randint(0, n, (6 * n,), generator=g)
    keep = batch[src] == batch[dst]
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    return x, torch.stack([src[keep], dst[keep]]), batch


def _model(kind: str, layers: int, seed: int = 0, **kw):
    torch.manual_seed(seed)
    model = WavyDIFFormer(5, 8, 3, num_layers=layers, residual=kind, readout="mean", source=True,
                          source_weight=0.3, dropout=0.3, dropout_at="force", **kw).double()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # off the identity initialisations
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _run(model, x, edges, batch, seed=3):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    out = model(x, edges, batch)
    (out.square().sum() + out[:, 0].sum()).backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kind", ["light_wave", "diffusion", "leapfrog", "wave"])
@pytest.mark.parametrize("case", range(3))
def test_mean_readout_is_the_output_layer_of_the_mean_state(kind, case):
    sizes = [[7], [3, 9, 1], [5, 2]][case]
    x, edges, batch = _graph(case, sizes, shuffle=case > 0)
    batch = None if case == 0 else batch
    layers = [1, 4, 7][case]
    model = _model(kind, layers, ffn=case == 2).eval()
    out, hidden = model(x, edges, batch, return_hidden=True)
    assert len(hidden) == layers + 1
    final = (lambda h: h) if model.final_norm is None else (lambda h: norm_fn(model.final_norm, batch)(h, None)[0])
    mean = sum(hidden[1:]) / layers  # the layers' outputs, not the input embedding
    torch.testing.assert_close(out, model.output(final(mean)), rtol=1e-12, atol=1e-12)
    if layers > 1:  # the last state's readout differs (the test can fail)
        assert not torch.allclose(out, model.output(final(hidden[-1])))


@pytest.mark.parametrize("kind,modes", [("leapfrog", ["checkpoint", "reversible"]), ("light_wave", ["checkpoint"]),
                                        ("diffusion", ["checkpoint"])])
@pytest.mark.parametrize("case", range(3))
def test_every_memory_mode_gives_the_plain_gradients(kind, modes, case):
    """Outputs and every parameter's gradient equal to the plain mode's: the
    checkpointed segments return their part of the sum, the reversible
    backward adds the sum's gradient at every layer."""
    layers = [3, 8, 13][case]
    sizes = [[6], [4, 11, 2], [9, 9]][case]
    x, edges, batch = _graph(10 + case, sizes, shuffle=case == 1)
    batch = None if case == 0 else batch
    norm = "batch" if (case == 2 and kind != "leapfrog") else "layer"
    model = _model(kind, layers, seed=case, ffn=case == 1, norm=norm).train()
    out, plain = _run(model, x, edges, batch)
    assert len(plain) == len(list(model.parameters()))
    for mode in modes:
        for segments in ([None, 1, layers, 5] if mode == "checkpoint" else [None]):
            if mode == "checkpoint":
                model.gradient_checkpointing, model.checkpoint_segments = True, segments
            else:
                model.reversible = True
            got, grads = _run(model, x, edges, batch)
            model.gradient_checkpointing, model.checkpoint_segments, model.reversible = False, None, False
            torch.testing.assert_close(got, out, rtol=0, atol=1e-11, msg=f"{mode} {segments}")
            assert grads.keys() == plain.keys()
            for name, g in plain.items():
                torch.testing.assert_close(grads[name], g, rtol=1e-9, atol=1e-11, msg=f"{mode} {segments} {name}")


def test_reversible_mean_readout_keeps_no_per_layer_tensors():
    x, edges, _ = _graph(0, [10], shuffle=False)

    def saved(layers: int) -> int:
        count = [0]

        def pack(t):
            count[0] += 1
            return t

        model = _model("leapfrog", layers, reversible=True).train()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(x, edges)
        out.sum().backward()
        return count[0]

    assert saved(2) == saved(9) == saved(24)


def test_readout_default_and_bad_values(tmp_path):
    assert WavyDIFFormer(5, 8, 3).readout == "last"
    with pytest.raises(InputError, match="unknown readout 'max'; choose one of"):
        WavyDIFFormer(5, 8, 3, readout="max")
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  readout: sum\n")
    with pytest.raises(ConfigError, match="model.readout"):
        load_config(str(path))
