"""WavyDIFFormer: DIFFormer with a choice of residual stepper."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .conv import DIFFormerConv
from .featscale import FeatScale
from .graph import gcn_adjacency
from .fused import STEP_IMPLS, step_and_norm
from .joint import JointFFN, JointIdentity, JointLayerNorm, JointPairNorm
from .steppers import STEPPERS, StepState, make_stepper
from .validate import InputError, check_choice, check_inputs

MOMENTUM_NORMS = ("joint", "state")
FORCE_SCALES = ("fixed", "rezero")
NORMS = {"layer": JointLayerNorm, "pair": JointPairNorm, "none": JointIdentity}


class WavyDIFFormer(nn.Module):
    r"""DIFFormer (`Wu et al., ICLR 2023 <https://arxiv.org/abs/2301.09474>`_)
    with the residual update replaced by a stepper of the `Wavy Transformer
    <https://arxiv.org/abs/2508.12787>`_ (NeurIPS 2025).

    .. math::
        X_0 &= \mathrm{dropout}(\mathrm{ReLU}(\mathrm{LN}(X W_{in} + b_{in}))) \\
        F_\ell &= \alpha_\ell\,(\mathrm{conv}_\ell(X_\ell) - X_\ell) \\
        (X_{\ell+1}, Y_{\ell+1}) &= \mathrm{dropout}(\mathrm{JointLN}(
            \mathrm{step}_\ell((X_\ell, Y_\ell), F_\ell))) \\
        \hat{Y} &= X_L W_{out} + b_{out}

    ``residual="diffusion"`` with ``tau=0.5`` is DIFFormer itself
    (``x = LN(0.5 conv(x) + 0.5 x)``). For the second-order kinds the velocity
    (or displacement) passes through the joint LayerNorm, FFN and the same
    dropout mask as the state (chain rule).

    Args:
        in_channels (int): input feature size.
        hidden_channels (int): hidden size ``C``.
        out_channels (int): number of outputs (classes or tasks).
        num_layers (int, optional): number of attention layers (steps).
            (default: :obj:`3`)
        residual (str, optional): ``"diffusion"``, ``"wave"``, ``"mix"`` or
            ``"light_wave"``. (default: ``"diffusion"``)
        heads (int, optional): attention heads. (default: :obj:`1`)
        kernel (str, optional): ``"simple"`` or ``"sigmoid"``.
            (default: ``"simple"``)
        qk_norm (str, optional): ``"global"``, ``"row"`` or ``"none"``.
            (default: ``"global"``)
        use_graph (bool, optional): local GCN branch. (default: :obj:`True`)
        graph_weight (float, optional): blend weight of the local branch;
            :obj:`None` adds it. (default: :obj:`None`)
        tau (float, optional): step size. (default: :obj:`0.5`)
        dropout (float, optional): dropout after the input layer, and after
            every layer unless ``layer_dropout`` is given. (default: :obj:`0.0`)
        layer_dropout (float, optional): dropout of the state (and, with the
            same mask, its velocity) after every layer; :obj:`None` uses
            ``dropout`` (DIFFormer). Deep stacks train far better with 0:
            a mask on the state at each of 64 layers erases the signal the
            dynamics carry (see README). (default: :obj:`None`)
        ffn (bool, optional): add a joint FFN sub-layer (residual, followed
            by a second joint LayerNorm) after each attention step.
            (default: :obj:`False`)
        ffn_activation (str, optional): ``"gelu"`` or ``"relu"``.
            (default: ``"gelu"``)
        lam0 (float, optional): initial ``lam`` of ``mix`` / ``light_wave``;
            :obj:`None` takes the stepper's default (0.5 / 0.88).
            (default: :obj:`None`)
        momentum_norm (str, optional): ``light_wave`` only: ``"joint"``
            passes the displacement through the joint LayerNorm like a
            velocity; ``"state"`` recomputes it as the difference of
            successive normalised states. (default: ``"joint"``)
        force_scale (str, optional): ``"fixed"`` (:math:`\alpha_\ell = 1`,
            tau alone sets the step) or ``"rezero"``: a learnable scalar
            :math:`\alpha_\ell` per layer that starts at 0 (ReZero,
            `Bachlechner et al. <https://arxiv.org/abs/2003.04887>`_), so
            every block starts as the identity map (up to the norm); for
            the wave kinds it scales the velocity update
            :math:`Y' = Y + \tau\alpha_\ell F`. (default: ``"fixed"``)
        norm (str, optional): normalisation after each step: ``"layer"``
            (:class:`JointLayerNorm`), ``"pair"`` (:class:`JointPairNorm`,
            PyG's PairNorm) or ``"none"``. (default: ``"layer"``)
        featscale (bool, optional): re-weight the direct and high-frequency
            parts of each layer's attention output with
            :class:`~wavygraph.nn.featscale.FeatScale` before the force is
            formed. (default: :obj:`False`)
        step_impl (str, optional): how each layer's step and joint LayerNorm
            run (``norm="layer"``): ``"eager"`` or ``"compile"`` (fused
            kernels by ``torch.compile``; same results to float rounding,
            see :mod:`wavygraph.nn.fused`). (default: ``"eager"``)

    Shapes:
        - **input:** x ``(N, in_channels)``, edge_index ``(2, E)``,
          batch ``(N,)`` (optional)
        - **output:** ``(N, out_channels)``; with ``return_hidden=True``
          also a list of ``num_layers + 1`` tensors ``(N, C)``: the input
          embedding, then every layer's output
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 3,
        residual: str = "diffusion",
        heads: int = 1,
        kernel: str = "simple",
        qk_norm: str = "global",
        use_graph: bool = True,
        graph_weight: float | None = None,
        tau: float = 0.5,
        dropout: float = 0.0,
        layer_dropout: float | None = None,
        ffn: bool = False,
        ffn_activation: str = "gelu",
        lam0: float | None = None,
        momentum_norm: str = "joint",
        force_scale: str = "fixed",
        norm: str = "layer",
        featscale: bool = False,
        step_impl: str = "eager",
    ):
        super().__init__()
        for name, value in (
            ("in_channels", in_channels),
            ("hidden_channels", hidden_channels),
            ("out_channels", out_channels),
            ("num_layers", num_layers),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        check_choice("residual", residual, STEPPERS)
        check_choice("momentum_norm", momentum_norm, MOMENTUM_NORMS)
        check_choice("force_scale", force_scale, FORCE_SCALES)
        check_choice("norm", norm, NORMS)
        check_choice("step_impl", step_impl, STEP_IMPLS)
        for name, value in (("dropout", dropout), ("layer_dropout", layer_dropout)):
            if value is not None and not 0.0 <= value < 1.0:
                raise InputError(f"{name} must lie in [0, 1), got {value!r}")
        self.in_channels = in_channels
        self.hidden_channels = hidden_channels
        self.out_channels = out_channels
        self.num_layers = num_layers
        self.residual = residual
        self.use_graph = use_graph
        self.dropout = dropout
        self.layer_dropout = dropout if layer_dropout is None else layer_dropout
        self.momentum_norm = momentum_norm
        self.force_scale = force_scale
        self.norm = norm
        self.step_impl = step_impl

        self.input = nn.Linear(in_channels, hidden_channels)
        self.input_norm = nn.LayerNorm(hidden_channels)
        self.convs = nn.ModuleList(
            DIFFormerConv(hidden_channels, heads, kernel, qk_norm, use_graph, graph_weight)
            for _ in range(num_layers)
        )
        step_opts = {} if lam0 is None else {"lam0": lam0}
        self.steppers = nn.ModuleList(
            make_stepper(residual, hidden_channels, tau, **step_opts) for _ in range(num_layers)
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
        self.output = nn.Linear(hidden_channels, out_channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise every parameter (the one place that does)."""
        for module in self.modules():
            if module is not self and hasattr(module, "reset_parameters"):
                module.reset_parameters()
        if self.alpha is not None:
            nn.init.zeros_(self.alpha)

    def _norm(self, norm: nn.Module, state: StepState, batch: Tensor | None) -> StepState:
        if self.norm == "pair":
            return StepState(*norm(state.x, state.v, batch))
        return StepState(*norm(state.x, state.v))

    def _dropout(self, state: StepState) -> StepState:
        if not self.training or self.layer_dropout == 0.0:
            return state
        if state.v is None:
            return StepState(F.dropout(state.x, self.layer_dropout, True), None)
        keep = 1.0 - self.layer_dropout
        # the mask F.dropout draws (same random numbers), shared by x and v
        mask = torch.empty_like(state.x).bernoulli_(keep).div_(keep)
        return StepState(state.x * mask, state.v * mask)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor | None = None,
        batch: Tensor | None = None,
        return_hidden: bool = False,
    ):
        n = check_inputs(x, self.in_channels, edge_index, batch, self.use_graph)  # x, edges (if needed), batch
        adj = None
        if self.use_graph:
            adj = edge_index if edge_index.layout != torch.strided else gcn_adjacency(edge_index, n, x.dtype)

        h = F.relu(self.input_norm(self.input(x)))  # (N, C)
        h = F.dropout(h, self.dropout, self.training)
        state = self.steppers[0].init(h)
        momentum_from_state = self.residual == "light_wave" and self.momentum_norm == "state"
        joint_step_norm = self.norm == "layer" and not momentum_from_state
        hidden = [h]
        for i in range(self.num_layers):
            ax = self.convs[i](state.x, adj, batch)  # A x, (N, C)
            if self.featscales:
                ax = self.featscales[i](ax, batch)
            force = ax - state.x  # F = A x - x
            if self.alpha is not None:
                force = self.alpha[i] * force
            prev_x = state.x
            if joint_step_norm:  # light_wave's hand-fused function, or torch.compile'd (step_impl="compile")
                state = step_and_norm(self.steppers[i], self.norms[i], state, force, self.step_impl)
            else:
                state = self.steppers[i](state, force)
                if momentum_from_state:  # the displacement is recomputed below: no velocity through norm and FFN
                    state = StepState(state.x, None)
                state = self._norm(self.norms[i], state, batch)
            if self.ffns:
                fx, fv = self.ffns[i](state.x, state.v)
                state = StepState(state.x + fx, None if state.v is None else state.v + fv)
                state = self._norm(self.ffn_norms[i], state, batch)
            if momentum_from_state:
                state = StepState(state.x, state.x - prev_x)
            state = self._dropout(state)
            hidden.append(state.x)
        out = self.output(state.x)  # (N, out_channels)
        return (out, hidden) if return_hidden else out

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, "
            f"{self.out_channels}, num_layers={self.num_layers}, residual={self.residual!r})"
        )
