"""WavyDIFFormer: DIFFormer with a choice of residual stepper."""
from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import checkpointing, reversible as rev
from .conv import DIFFormerConv
from .featscale import FeatScale
from .graph import as_adjacency
from .joint_ffn import JointFFN
from .joint_norm import NORMS
from .model_args import DIFFORMER_ARGS, DROPOUT_AT, FORCE_SCALES, KIND_OPTIONS, KIND_TAU, check_model_args
from .prenorm import graph_centre, graph_layer_norm
from .steppers import STEPPERS, Stepper, StepState, make_stepper
from .validate import check_inputs

class LayerInputs(NamedTuple):
    """What every layer reads besides the state: the propagation matrix,
    the batch vector, the source ``x0`` (or None) and the dropout seed of a
    pre-norm kind's forward pass (None: no dropout)."""

    adj: Optional[Tensor]
    batch: Optional[Tensor]
    x0: Optional[Tensor]
    seed: Optional[int]


class WavyDIFFormer(nn.Module):
    r"""DIFFormer (`Wu et al., ICLR 2023 <https://arxiv.org/abs/2301.09474>`_)
    with the residual update replaced by a stepper of the `Wavy Transformer
    <https://arxiv.org/abs/2508.12787>`_ (NeurIPS 2025).

    .. math::
        X_0 &= \mathrm{dropout}(\mathrm{ReLU}(\mathrm{LN}(X W_{in} + b_{in}))) \\
        F_\ell &= \alpha_\ell\,(\mathrm{conv}_\ell(X_\ell) - X_\ell) \\
        (X_{\ell+1}, Y_{\ell+1}) &= \mathrm{dropout}(\mathrm{norm}(
            \mathrm{step}_\ell((X_\ell, Y_\ell), F_\ell))) \\
        \hat{Y} &= X_L W_{out} + b_{out}

    The defaults are chosen to serve the usual PyG training loop at 4 and 16
    layers (by validation accuracy on Cora, ``benchmarks/pyg_loop.py``,
    docs/benchmarks.md): the depth recipe's model settings
    (``configs/cora.yaml``) with the local branch blended 0.9 instead of
    0.8. One shared attention layer whose values are the layer input, its
    local GCN branch blended 0.9; dropout 0.2, inside the force;
    :math:`0.25 X_0` added before every norm; step 1 (``wave`` and
    ``light_wave_joint`` 0.5), ``mix`` starting from :math:`\lambda = 0.1`.
    DIFFormer's own settings fall to one class at 16 layers in that loop.
    DIFFormer itself (``x = LN(0.5 conv(x) + 0.5 x)``, then dropout) is
    ``residual="diffusion"`` with :data:`DIFFORMER_ARGS` (``graph_weight=None,
    value_proj=True, source=False, tau=0.5, dropout=0.0, dropout_at="state",
    shared_attention=False``), the defaults of the config's ``model`` keys
    (docs/fidelity.md). The stepper decides
    what its extra state is and how the norm, FFN and dropout treat it
    (:class:`~wavygraph.nn.steppers.Stepper`): a velocity passes through the
    joint LayerNorm, the joint FFN and the state's dropout mask (chain rule);
    ``light_wave``'s previous state passes through none of them.

    Args:
        in_channels (int): input feature size.
        hidden_channels (int): hidden size ``C``.
        out_channels (int): number of outputs (classes or tasks).
        num_layers (int, optional): number of attention layers (steps).
            (default: :obj:`3`)
        residual (str, optional): a registered residual kind,
            :data:`~wavygraph.nn.steppers.STEPPERS`: ``"diffusion"``,
            ``"wave"``, ``"mix"``, ``"light_wave"``, ``"light_wave_joint"``
            or one added by :func:`~wavygraph.nn.register_stepper`.
            (default: ``"diffusion"``)
        residual_options (dict, optional): options of the residual kind,
            e.g. ``{"lam0": 0.5}`` for ``mix`` and the light waves; an
            option the kind does not take is an error. :obj:`None` takes the
            kind's options of :data:`KIND_OPTIONS` (``mix``: ``lam0=0.1``,
            which kept ``mix`` at GCN level at 4 layers where 0.5 did not);
            a dict, even empty, leaves every other option at the kind's own
            default (``mix``: 0.5). (default: :obj:`None`)
        heads (int, optional): attention heads. (default: :obj:`1`)
        kernel (str, optional): ``"simple"`` or ``"sigmoid"``.
            (default: ``"simple"``)
        qk_norm (str, optional): ``"global"``, ``"row"`` or ``"none"``;
            :obj:`None` takes the kernel's own (``global`` for ``simple``,
            ``none`` for ``sigmoid``). (default: :obj:`None`)
        use_graph (bool, optional): local GCN branch. (default: :obj:`True`)
        graph_weight (float, optional): blend weight of the local branch,
            ``(1 - w) attention + w local``; :obj:`None` adds it (DIFFormer).
            0.9 rather than the recipe's 0.8: higher validation accuracy in
            the PyG loop in six of the eight kind-depth cells.
            (default: :obj:`0.9`)
        value_proj (bool, optional): project the values; :obj:`False` uses
            the layer input as the values (DIFFormer's ``--use_weight``
            off, as in its Cora line). (default: :obj:`False`)
        input_norm (bool, optional): LayerNorm after the input layer
            (DIFFormer's ``--use_bn`` covers it and the per-layer norms;
            ``--use_bn`` off is ``input_norm=False, norm="none"``).
            (default: :obj:`True`)
        source (bool, optional): add the input embedding :math:`X_0` to
            every layer's stepped state before its norm (DIFFormer's
            ``--use_source``); it holds the depth. (default: :obj:`True`)
        source_weight (float, optional): the weight :math:`\alpha` of the
            added input embedding, :math:`\alpha X_0` (this package's own
            option, after GCNII's and APPNP's initial residual; DIFFormer
            adds :math:`X_0` itself, ``1.0``). Only with ``source=True``;
            :obj:`None` is ``0.25``. (default: :obj:`None`)
        tau (float, optional): step size; :obj:`None` takes the kind's of
            :data:`KIND_TAU`: ``1.0`` for ``diffusion``, ``mix`` and
            ``light_wave``; ``0.5`` for ``wave`` (undamped, it fell to
            37.25 % on Cora at step 1 and 4 layers), ``light_wave_joint``
            and kinds not listed. (default: :obj:`None`)
        input_dropout (float, optional): dropout of the raw node features
            before the input layer (as PyG's GCN example drops its input).
            (default: :obj:`0.0`)
        dropout (float, optional): dropout after the input layer, and in
            every layer unless ``layer_dropout`` is given. (default: :obj:`0.2`)
        layer_dropout (float, optional): the per-layer dropout rate;
            :obj:`None` uses ``dropout``. (default: :obj:`None`)
        dropout_at (str, optional): where the per-layer dropout acts:
            ``"state"`` (DIFFormer: on the layer's output state, and with the
            same mask on a velocity) or ``"force"`` (the Wavy Transformer
            authors: on the attention output inside the force,
            :math:`F = \mathrm{dropout}(\mathrm{conv}(X)) - X`, and on each
            FFN branch with its own mask). (default: ``"force"``)
        ffn (bool, optional): add a joint FFN sub-layer (residual, followed
            by a second norm) after each attention step.
            (default: :obj:`False`)
        ffn_activation (str, optional): ``"gelu"`` or ``"relu"``.
            (default: ``"gelu"``)
        force_scale (str, optional): ``"fixed"`` (:math:`\alpha_\ell = 1`,
            tau alone sets the step) or ``"rezero"``: a learnable scalar
            :math:`\alpha_\ell` per layer that starts at 0 (ReZero,
            `Bachlechner et al. <https://arxiv.org/abs/2003.04887>`_).
            (default: ``"fixed"``)
        norm (str, optional): normalisation after each step: ``"layer"``
            (:class:`JointLayerNorm`), ``"pair"`` (:class:`JointPairNorm`,
            PyG's PairNorm) or ``"none"``. (default: ``"layer"``)
        featscale (bool, optional): re-weight the direct and high-frequency
            parts of each layer's attention output with
            :class:`~wavygraph.nn.featscale.FeatScale` before the force is
            formed. (default: :obj:`False`)
        step_impl (str, optional): how each layer's step and joint LayerNorm
            run (``norm="layer"``; with ``source=True`` always eager):
            ``"eager"`` or ``"compile"`` (kernels generated by
            ``torch.compile``, same results to float rounding, see
            :mod:`wavygraph.nn.steppers.compiled`). (default: ``"eager"``)
        shared_attention (bool, optional): one attention layer (query, key
            and value maps and local branch) for all ``num_layers`` steps,
            so that the stack integrates one time-invariant vector field
            and its attention parameters do not grow with depth (this
            package's own option, after GCNII's shared weights); the norms
            and the steppers' own parameters stay per layer.
            (default: :obj:`True`)
        gradient_checkpointing (bool, optional): in training with autograd
            on, keep only the input state of each segment of layers and
            recompute the segment in backward
            (:mod:`wavygraph.nn.checkpointing`; the last segment is not
            recomputed); same gradients, about one more forward pass.
            (default: :obj:`False`)
        checkpoint_segments (int, optional): the number of segments;
            :obj:`None` takes ``ceil(sqrt(num_layers))``. Only with
            ``gradient_checkpointing=True``. (default: :obj:`None`)
        reversible (bool, optional): in training with autograd on, compute
            the gradients by inverting the steps, storing no layer's state
            (:mod:`wavygraph.nn.reversible`); only for the kinds with an
            inverse (``leapfrog``), and not with ``gradient_checkpointing``
            (which it makes useless). (default: :obj:`False`)

    A kind with ``pre_norm = True`` (``leapfrog``,
    :class:`~wavygraph.nn.steppers.leapfrog.LeapfrogStepper`) takes the layer's norms
    inside its force and nothing after the step: the model skips the
    post-step norm, adds the FFN to the force, applies the per-layer dropout
    inside the force with seeded masks and puts a final norm before the
    output layer, so that every step stays invertible.

    Shapes:
        - **input:** x ``(N, in_channels)``, edge_index ``(2, E)``,
          batch ``(N,)`` (optional)
        - **output:** ``(N, out_channels)``; with ``return_hidden=True``
          also a list of ``num_layers + 1`` tensors ``(N, C)``: the input
          embedding, then every layer's output

    ``forward(..., layer_hook=fn)`` calls ``fn(i, x_i)`` with ``i = 0`` and
    the input embedding, then after every layer ``i = 1..L`` with its output
    state ``x_i (N, C)``, in every mode (plain, checkpointed, reversible,
    evaluation); only ``return_hidden=True`` keeps a list of the states.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 3,
        residual: str = "diffusion",
        residual_options: dict | None = None,
        heads: int = 1,
        kernel: str = "simple",
        qk_norm: str | None = None,
        use_graph: bool = True,
        graph_weight: float | None = 0.9,
        value_proj: bool = False,
        input_norm: bool = True,
        source: bool = True,
        source_weight: float | None = None,
        tau: float | None = None,
        input_dropout: float = 0.0,
        dropout: float = 0.2,
        layer_dropout: float | None = None,
        dropout_at: str = "force",
        ffn: bool = False,
        ffn_activation: str = "gelu",
        force_scale: str = "fixed",
        norm: str = "layer",
        featscale: bool = False,
        step_impl: str = "eager",
        shared_attention: bool = True,
        gradient_checkpointing: bool = False,
        checkpoint_segments: int | None = None,
        reversible: bool = False,
    ):
        super().__init__()
        check_model_args(in_channels, hidden_channels, out_channels, num_layers, residual, residual_options,
                         (input_dropout, dropout, layer_dropout), dropout_at, force_scale, norm, step_impl,
                         source, source_weight)
        rev.check_memory_args(residual, gradient_checkpointing, checkpoint_segments, reversible)
        self.gradient_checkpointing = gradient_checkpointing
        self.checkpoint_segments = checkpoint_segments
        self.reversible = reversible
        self.pre_norm = bool(STEPPERS[residual].pre_norm)
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.out_channels = out_channels
        self.num_layers = num_layers
        self.residual = residual
        self.use_graph = use_graph
        self.source = source
        self.source_weight = 0.25 if source_weight is None else float(source_weight)
        self.input_dropout = input_dropout
        self.dropout = dropout
        self.layer_dropout = dropout if layer_dropout is None else layer_dropout
        self.dropout_at = dropout_at
        self.force_scale = force_scale
        self.norm = norm
        self.step_impl = step_impl

        self.input = nn.Linear(in_channels, hidden_channels)
        self.input_norm = nn.LayerNorm(hidden_channels) if input_norm else None
        convs = [DIFFormerConv(hidden_channels, heads, kernel, qk_norm, use_graph, graph_weight, value_proj=value_proj)
                 for _ in range(1 if shared_attention else num_layers)]
        self.shared_attention = shared_attention
        self.convs = nn.ModuleList(convs * num_layers if shared_attention else convs)  # shared: one module L times
        options = dict(KIND_OPTIONS.get(residual, {}) if residual_options is None else residual_options)
        tau = KIND_TAU.get(residual, 0.5) if tau is None else tau
        self.steppers = nn.ModuleList(
            make_stepper(residual, hidden_channels, tau, **options) for _ in range(num_layers)
        )
        norm_cls = NORMS[norm]
        self.norms = nn.ModuleList(norm_cls(hidden_channels) for _ in range(num_layers))
        self.ffns = nn.ModuleList(
            JointFFN(hidden_channels, activation=ffn_activation) for _ in range(num_layers) if ffn
        )
        self.ffn_norms = nn.ModuleList(norm_cls(hidden_channels) for _ in range(num_layers) if ffn)
        self.featscales = nn.ModuleList(FeatScale(hidden_channels) for _ in range(num_layers) if featscale)
        # ReZero's per-layer force scale alpha_l (starts at 0)
        self.alpha = nn.Parameter(torch.empty(num_layers)) if force_scale == "rezero" else None
        self.final_norm = norm_cls(hidden_channels) if self.pre_norm else None  # pre-norm: the state's only norm
        self.output = nn.Linear(hidden_channels, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise every parameter (the one place that does)."""
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        if self.alpha is not None:
            nn.init.zeros_(self.alpha)

    def _norm_fn(self, norm: nn.Module, batch: Tensor | None, x0: Tensor | None):
        """``norm`` as the ``(x, v) -> (x', v')`` callable the stepper takes
        (PairNorm gets the batch; ``source`` adds ``x0`` before it)."""
        fn = partial(norm, batch=batch) if self.norm == "pair" else norm
        if x0 is None:
            return fn
        return lambda x, v: fn(x + x0, v)

    def _layer_dropout(self, t: Tensor | None) -> Tensor | None:
        return None if t is None else F.dropout(t, self.layer_dropout, self.training)

    def _state_dropout(self, state: StepState, stepper: Stepper) -> StepState:
        if not self.training or self.layer_dropout == 0.0 or self.dropout_at != "state":
            return state
        if state.v is None or not stepper.v_is_derivative:
            return StepState(F.dropout(state.x, self.layer_dropout, True), state.v)
        keep = 1.0 - self.layer_dropout
        # the mask F.dropout draws (same random numbers), shared by x and its velocity
        mask = torch.empty_like(state.x).bernoulli_(keep).div_(keep)
        return StepState(state.x * mask, state.v * mask)

    def _ffn(self, i: int, state: StepState, stepper: Stepper, norm) -> StepState:
        """The joint FFN sub-layer: residual, then the norm; a velocity
        takes the FFN's derivative, any other extra state passes through."""
        v = state.v if stepper.v_is_derivative else None
        fx, fv = self.ffns[i](state.x, v)
        if self.dropout_at == "force":  # the authors: each branch with its own mask
            fx, fv = self._layer_dropout(fx), self._layer_dropout(fv)
        x, v = norm(state.x + fx, None if v is None else v + fv)
        return StepState(x, v if stepper.v_is_derivative else state.v)

    def _layer(self, i: int, state: StepState, inputs: LayerInputs) -> StepState:
        adj, batch, x0 = inputs.adj, inputs.batch, inputs.x0
        stepper = self.steppers[i]
        if self.pre_norm:
            return stepper(state, self._prenorm_force(i, state.x, inputs, x0))
        out = self.convs[i](state.x, adj, batch)  # A x, (N, C)
        if self.featscales:
            out = self.featscales[i](out, batch)
        if self.dropout_at == "force":
            out = self._layer_dropout(out)
        force = out - state.x  # F = A x - x
        if self.alpha is not None:
            force = self.alpha[i] * force
        state = stepper.step_and_norm(state, force, self._norm_fn(self.norms[i], batch, x0), self.step_impl)
        if self.ffns:
            state = self._ffn(i, state, stepper, self._norm_fn(self.ffn_norms[i], batch, None))
        return self._state_dropout(state, stepper)

    def _prenorm_force(self, i: int, x: Tensor, inputs: LayerInputs, x0: Tensor | None) -> Tensor:
        """The force of a pre-norm kind, a function of ``x`` (and ``x0``)
        alone (:class:`~wavygraph.nn.steppers.leapfrog.LeapfrogStepper`)."""
        p, seed, state_drop = self.layer_dropout, inputs.seed, self.dropout_at == "state"
        z = self._prenorm(self.norms[i], x, inputs.batch)  # Z = N(X)
        zin = rev.seeded_dropout(z, p, seed, 3 * i) if state_drop else z
        out = self.convs[i](zin, inputs.adj, inputs.batch)  # A(Z) Z
        if self.featscales:
            out = self.featscales[i](out, inputs.batch)
        if not state_drop:
            out = rev.seeded_dropout(out, p, seed, 3 * i + 1)
        force = out - zin
        if self.alpha is not None:
            force = self.alpha[i] * force
        if x0 is not None:  # a spring toward the input embedding: w (X_0 - Z)
            force = force + (x0 - self.source_weight * z)
        if self.ffns:
            zf = self._prenorm(self.ffn_norms[i], x, inputs.batch)
            fx = self.ffns[i](rev.seeded_dropout(zf, p, seed, 3 * i + 2) if state_drop else zf, None)[0]
            force = force + (fx if state_drop else rev.seeded_dropout(fx, p, seed, 3 * i + 2))
        return graph_centre(force, inputs.batch)  # no force on the graph's mean (nothing restores it)

    def _prenorm(self, norm: nn.Module, x: Tensor, batch: Tensor | None) -> Tensor:
        """A pre-norm kind's norm: ``norm="layer"`` pools the variance over
        each graph (:func:`~wavygraph.nn.prenorm.graph_layer_norm`)."""
        if isinstance(norm, NORMS["layer"]):
            return graph_layer_norm(x, norm.weight, norm.bias, norm.eps, batch)
        return self._norm_fn(norm, batch, None)(x, None)[0]

    def _layer_params(self, i: int) -> list:
        """The parameters layer ``i`` uses (its force's and its stepper's)."""
        mods = [self.convs[i], self.norms[i], self.steppers[i]]
        mods += [m[i] for m in (self.featscales, self.ffns, self.ffn_norms) if len(m)]
        params = [p for m in mods for p in m.parameters()]
        return params + ([self.alpha] if self.alpha is not None else [])

    def _embed(self, x: Tensor, edge_index: Tensor | None, batch: Tensor | None) -> tuple[Tensor, LayerInputs]:
        """The input embedding ``X_0 (N, C)`` and what every layer reads."""
        n = check_inputs(x, self.in_channels, edge_index, batch, self.use_graph, like=self.input.weight)
        adj = None
        if self.use_graph:
            adj = as_adjacency(edge_index, n, x.dtype)
        h = self.input(F.dropout(x, self.input_dropout, self.training))  # (N, C)
        if self.input_norm is not None:
            h = self.input_norm(h)
        h = F.dropout(F.relu(h), self.dropout, self.training)
        x0 = self.source_weight * h if self.source else None  # 1.0 * h == h exactly
        seeded = self.pre_norm and self.training and self.layer_dropout > 0.0
        return h, LayerInputs(adj, batch, x0, rev.draw_seed() if seeded else None)

    def _reversible_stack(self, inputs: LayerInputs, hook) -> rev.ReversibleStack:
        """The layers as :mod:`~wavygraph.nn.reversible` takes them (a pre-norm, invertible kind)."""
        force = lambda i, x, x0: self._prenorm_force(i, x, inputs, x0)  # noqa: E731
        return rev.ReversibleStack(list(self.steppers), force, self._layer_params, hook)

    def _stack(self, h: Tensor, inputs: LayerInputs, hook) -> StepState:
        """The ``num_layers`` layers from ``X_0 = h``: plain, checkpointed
        or reversible (the last two in training with autograd on only)."""
        state = self.steppers[0].init(h)
        layer = partial(self._layer, inputs=inputs)
        memory_mode = self.training and torch.is_grad_enabled()
        if memory_mode and self.reversible:
            stack = self._reversible_stack(inputs, hook)
            return StepState(*rev.reversible_stack(stack, state.x, state.v, inputs.x0))
        if memory_mode and self.gradient_checkpointing:
            return checkpointing.run_checkpointed(layer, state, self.num_layers, self.checkpoint_segments, hook)
        return checkpointing.run_layers(layer, state, 0, self.num_layers, hook)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor | None = None,
        batch: Tensor | None = None,
        return_hidden: bool = False,
        layer_hook: Callable[[int, Tensor], None] | None = None,
    ):
        h, inputs = self._embed(x, edge_index, batch)
        hidden = [] if return_hidden else None
        hook = checkpointing.with_hidden(layer_hook, hidden)
        if hook is not None:
            hook(0, h)
        state = self._stack(h, inputs, hook)
        x_out = state.x if self.final_norm is None else self._norm_fn(self.final_norm, batch, None)(state.x, None)[0]
        out = self.output(x_out)  # (N, out_channels)
        return (out, hidden) if return_hidden else out

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, "
            f"{self.out_channels}, num_layers={self.num_layers}, residual={self.residual!r})"
        )

