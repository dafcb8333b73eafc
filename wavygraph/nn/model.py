"""WavyDIFFormer: DIFFormer with a choice of residual stepper, as an input
embedding, a sequence of layers (:mod:`wavygraph.nn.layer`) and an output layer."""
from __future__ import annotations

import re
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from wavygraph.checks import check_positive_int

from .conv import DIFFormerConv
from .featscale import FeatScale
from .graph import as_adjacency
from .joint_ffn import JointFFN
from .joint_norm import NORMS
from .layer import Force, LayerContext, draw_seed, layer_class, norm_fn
from .memory import MEMORY_KEYS, MemoryModes
from .model_args import DIFFORMER_ARGS, RECIPE_ARGS, check_model_args, init_signature, model_args  # noqa: F401
from .sequential import Total
from .steppers import STEPPERS, make_stepper
from .validate import InputError, check_inputs

class WavyDIFFormer(MemoryModes, nn.Module):
    r"""DIFFormer (`Wu et al., ICLR 2023 <https://arxiv.org/abs/2301.09474>`_)
    with the residual update replaced by a stepper of the `Wavy Transformer
    <https://arxiv.org/abs/2508.12787>`_ (NeurIPS 2025).

    .. math::
        X_0 &= \mathrm{dropout}(\mathrm{ReLU}(\mathrm{LN}(X W_{in} + b_{in}))) \\
        F_\ell &= \alpha_\ell\,(\mathrm{conv}_\ell(X_\ell) - X_\ell) \\
        (X_{\ell+1}, Y_{\ell+1}) &= \mathrm{dropout}(\mathrm{norm}(
            \mathrm{step}_\ell((X_\ell, Y_\ell), F_\ell))) \\
        \hat{Y} &= X_L W_{out} + b_{out}

    The model is an input embedding, ``num_layers`` layers and an output
    layer; each layer (:mod:`wavygraph.nn.layer`) is a force module (the
    attention layer and what shapes its output) and a stepper, which decides
    what its extra state is and how the norm, FFN and dropout treat it
    (:class:`~wavygraph.nn.steppers.Stepper`): a velocity passes through the
    joint LayerNorm, the joint FFN and the state's dropout mask (chain rule);
    ``light_wave``'s previous state passes through none of them. How the
    layers are run is the memory mode's business (:mod:`wavygraph.nn.memory`).

    The keyword arguments and their defaults are those of
    :class:`~wavygraph.nn.model_args.ModelArgs`, the same as the config's
    ``model`` keys: DIFFormer's layer with dropout 0.2
    (``x = LN(0.5 conv(x) + 0.5 x)``, then dropout; DIFFormer's own model is
    ``residual="diffusion"`` with :data:`DIFFORMER_ARGS`, docs/fidelity.md).
    The depth recipe that serves the usual PyG training loop at 4 and 16
    layers (by validation accuracy on Cora, ``benchmarks/pyg_loop.py``,
    docs/benchmarks.md) is :data:`RECIPE_ARGS`: one shared attention layer
    whose values are the layer input, its local branch blended 0.9, dropout
    inside the force, :math:`0.25 X_0` added before every norm, and each
    kind's own step size and options (``tau=None``,
    ``residual_options=None``), as in
    ``WavyDIFFormer(in, hidden, out, residual="wave", **RECIPE_ARGS)``.

    Args:
        in_channels (int): input feature size.
        hidden_channels (int): hidden size ``C``.
        out_channels (int): number of outputs (classes or tasks).
        num_layers (int, optional): number of attention layers (steps).
            (default: :obj:`3`)
        residual (str, optional): a registered residual kind,
            :data:`~wavygraph.nn.steppers.STEPPERS`: ``"diffusion"``,
            ``"wave"``, ``"mix"``, ``"light_wave"``, ``"light_wave_joint"``,
            ``"leapfrog"`` or one added by
            :func:`~wavygraph.nn.register_stepper`. (default: ``"diffusion"``)
        residual_options (dict, optional): options of the residual kind,
            e.g. ``{"lam0": 0.5}`` for ``mix`` and the light waves; an
            option the kind does not take is an error; ``{}`` leaves every
            option at the kind's own default (``mix``: 0.5). :obj:`None`
            takes the stepper's ``default_options`` (``mix``: ``lam0=0.1``).
            (default: ``{}``)
        heads (int, optional): attention heads. (default: :obj:`1`)
        kernel (str, optional): ``"simple"`` or ``"sigmoid"``.
            (default: ``"simple"``)
        qk_norm (str, optional): ``"global"``, ``"row"`` or ``"none"``;
            :obj:`None` takes the kernel's own (``global`` for ``simple``,
            ``none`` for ``sigmoid``). (default: :obj:`None`)
        use_graph (bool, optional): local GCN branch. (default: :obj:`True`)
        graph_weight (float, optional): blend weight of the local branch,
            ``(1 - w) attention + w local``; :obj:`None` adds it (DIFFormer).
            (default: :obj:`None`)
        value_proj (bool, optional): project the values; :obj:`False` uses
            the layer input as the values (DIFFormer's ``--use_weight``
            off, as in its Cora line). (default: :obj:`True`)
        input_norm (bool, optional): LayerNorm after the input layer
            (DIFFormer's ``--use_bn`` covers it and the per-layer norms;
            ``--use_bn`` off is ``input_norm=False, norm="none"``).
            (default: :obj:`True`)
        source (bool, optional): add the input embedding :math:`X_0` to
            every layer's stepped state before its norm (DIFFormer's
            ``--use_source``). (default: :obj:`False`)
        source_weight (float, optional): the weight :math:`\alpha` of the
            added input embedding, :math:`\alpha X_0` (this package's own
            option, after GCNII's and APPNP's initial residual; DIFFormer
            adds :math:`X_0` itself, ``1.0``). Another value than ``1.0``
            needs ``source=True``; :obj:`None` is ``0.25``.
            (default: :obj:`1.0`)
        tau (float, optional): step size; :obj:`None` takes the stepper's
            ``default_tau``: ``1.0`` for ``diffusion``, ``mix`` and
            ``light_wave``, ``0.5`` for the others. (default: :obj:`0.5`)
        tau_layers (int, optional): the depth at which ``tau`` is the step;
            at ``num_layers`` layers the step is
            ``tau * tau_layers / num_layers``, so that every depth
            integrates the same time span (an undamped kind such as
            ``leapfrog`` oscillates for as long as it is integrated, and
            its last layers read another phase at another depth).
            :obj:`None` keeps ``tau`` at every depth. (default: :obj:`None`)
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
            FFN branch with its own mask). (default: ``"state"``)
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
            (:class:`JointLayerNorm`), ``"batch"`` (:class:`JointBatchNorm`,
            over the nodes: it keeps the differences of scale between nodes,
            but in training a batch's graphs share its statistics), ``"pair"``
            (:class:`JointPairNorm`, PyG's PairNorm) or ``"none"``.
            (default: ``"layer"``)
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
            (default: :obj:`False`)
        readout (str, optional): what the output layer reads: ``"last"``,
            the last state :math:`X_L`, or ``"mean"``, the mean of the
            layers' output states :math:`\frac{1}{L}\sum_{\ell=1}^{L} X_\ell`
            (a readout over layers, as jumping knowledge's mean; for an
            undamped kind such as ``leapfrog`` it is the time average of the
            oscillation around the source's fixed point). Kept as a running
            sum: no more memory in depth, in every memory mode.
            (default: ``"last"``)
        identity_map (float, optional): GCNII's identity mapping
            (`Chen et al., ICML 2020 <https://arxiv.org/abs/2007.02133>`_)
            with strength :math:`\lambda`: each layer ``l = 1 .. L`` has a
            weight :math:`W_\ell` of its own (also with
            ``shared_attention=True``), and its attention output :math:`h`
            becomes :math:`(1 - \beta_\ell) h + \beta_\ell h W_\ell` with
            :math:`\beta_\ell = \ln(\lambda / \ell + 1)`: the deeper the
            layer, the closer to the identity. :obj:`None`: no weight.
            (default: :obj:`None`)
        **memory: the memory mode's three arguments, documented in
            :mod:`wavygraph.nn.memory` (all off by default).

    A kind with ``pre_norm = True`` (``leapfrog``,
    :class:`~wavygraph.nn.steppers.leapfrog.LeapfrogStepper`) runs as
    :class:`~wavygraph.nn.layer.PreNormLayer`s: the layer's norms act
    inside its force and nothing follows the step, and the model puts a
    final norm before the output layer, so that every step stays invertible.

    Shapes:
        - **input:** x ``(N, in_channels)``, edge_index ``(2, E)``,
          batch ``(N,)`` (optional)
        - **output:** ``(N, out_channels)``; with ``return_hidden=True``
          also a list of ``num_layers + 1`` tensors ``(N, C)``: the input
          embedding, then every layer's output

    ``forward(..., layer_hook=fn)`` calls ``fn(i, x_i)`` with ``i = 0`` and
    the input embedding, then after every layer ``i = 1..L`` with its output
    state ``x_i (N, C)``, in every memory mode and in evaluation; only
    ``return_hidden=True`` keeps a list of the states, which carry their
    gradients in every memory mode.
    """

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, **kwargs):
        super().__init__()
        self.args = args = model_args(hidden_channels, kwargs)
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
            check_positive_int(name, value, InputError)
        check_model_args(args)
        self.set_memory_mode(*(getattr(args, name) for name in MEMORY_KEYS))
        num_layers, dropout = args.num_layers, args.dropout
        self.in_channels, self.hidden_channels, self.out_channels = in_channels, hidden_channels, out_channels
        self.num_layers, self.residual = num_layers, args.residual
        self.use_graph, self.source = args.use_graph, args.source
        self.source_weight = 0.25 if args.source_weight is None else float(args.source_weight)
        self.input_dropout, self.dropout = args.input_dropout, dropout
        self.layer_dropout = dropout if args.layer_dropout is None else args.layer_dropout
        self.shared_attention, self.dropout_at = args.shared_attention, args.dropout_at
        self.force_scale, self.norm, self.step_impl = args.force_scale, args.norm, args.step_impl
        self.readout = args.readout

        self.input = nn.Linear(in_channels, hidden_channels)
        self.input_norm = nn.LayerNorm(hidden_channels) if args.input_norm else None
        convs = [DIFFormerConv(hidden_channels, args.heads, args.kernel, args.qk_norm, args.use_graph,
                               args.graph_weight, value_proj=args.value_proj, local=args.local)
                 for _ in range(1 if args.shared_attention else num_layers)]
        norm_cls, layer_cls = NORMS[args.norm], layer_class(STEPPERS[args.residual])
        # ReZero's force scales alpha_l (start at 0), one (L,) parameter shared by the layers
        alpha = nn.Parameter(torch.empty(num_layers)) if args.force_scale == "rezero" else None

        def layer(i: int) -> nn.Module:
            ffn = args.ffn
            force = Force(convs[0 if args.shared_attention else i], i,
                          FeatScale(hidden_channels) if args.featscale else None, alpha,
                          JointFFN(hidden_channels, activation=args.ffn_activation) if ffn else None,
                          norm_cls(hidden_channels) if ffn else None, self.layer_dropout, args.dropout_at,
                          self.source_weight, args.identity_map, hidden_channels)
            stepper = make_stepper(args.residual, hidden_channels, args.step_size(), **args.kind_options())
            return layer_cls(force, stepper, norm_cls(hidden_channels), args.step_impl)

        self.layers = nn.ModuleList(layer(i) for i in range(num_layers))
        self.pre_norm = bool(layer_cls.final_norm)
        self.final_norm = norm_cls(hidden_channels) if layer_cls.final_norm else None  # pre-norm: the output's norm
        self.output = nn.Linear(hidden_channels, out_channels)
        self.register_load_state_dict_pre_hook(_remap_flat_keys)
        self.reset_parameters()

    # the parts of every layer, in depth order (a shared module repeats)
    convs = property(lambda self: [layer.force.conv for layer in self.layers])
    steppers = property(lambda self: [layer.stepper for layer in self.layers])
    norms = property(lambda self: [layer.norm for layer in self.layers])
    ffns = property(lambda self: [layer.force.ffn for layer in self.layers if layer.force.ffn is not None])
    ffn_norms = property(lambda self: [layer.force.ffn_norm for layer in self.layers if layer.force.ffn is not None])
    featscales = property(lambda self: [layer.force.featscale for layer in self.layers
                                        if layer.force.featscale is not None])
    #: ReZero's ``(L,)`` force scales (None with ``force_scale="fixed"``)
    alpha = property(lambda self: self.layers[0].force.alpha)

    def reset_parameters(self) -> None:
        """Initialise every parameter (the one place that does), the modules
        in the order input, attention, steppers, norms, FFNs, FeatScales,
        identity maps, output."""
        order = [self.input, self.input_norm, *self.convs, *self.steppers, *self.norms, *self.ffns,
                 *self.ffn_norms, *self.featscales, *(layer.force.identity for layer in self.layers),
                 self.final_norm, self.output]
        seen = set()
        for top in order:
            for module in (top.modules() if top is not None else ()):
                if id(module) not in seen and hasattr(module, "reset_parameters"):
                    seen.add(id(module))
                    module.reset_parameters()
                seen.add(id(module))
        if self.alpha is not None:
            nn.init.zeros_(self.alpha)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """The parameters grouped as before the layers were modules (ReZero's
        scales, input layer, attention layers, steppers, norms, FFNs, their
        norms, FeatScales, identity maps, final norm, output layer; depth order within a
        group), so that an optimiser's state saved then still matches its
        parameters (``model.parameters()`` follows this order)."""
        params = list(super().named_parameters(prefix, recurse, remove_duplicate))
        return iter(sorted(params, key=lambda item: _parameter_group(item[0][len(prefix):].lstrip("."))))

    def embed(self, x: Tensor, edge_index: Tensor | None = None,
              batch: Tensor | None = None) -> tuple[Tensor, LayerContext]:
        """The input embedding ``X_0 (N, C)`` and what every layer reads."""
        n = check_inputs(x, self.in_channels, edge_index, batch, self.use_graph, like=self.input.weight)
        adj = as_adjacency(edge_index, n, x.dtype) if self.use_graph else None
        h = self.input(F.dropout(x, self.input_dropout, self.training))  # (N, C)
        if self.input_norm is not None:
            h = self.input_norm(h)
        h = F.dropout(F.relu(h), self.dropout, self.training)
        x0 = self.source_weight * h if self.source else None  # 1.0 * h == h exactly
        return h, LayerContext(adj, batch, x0, draw_seed() if self.layers[0].wants_seed() else None)

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor | None = None,
        batch: Tensor | None = None,
        return_hidden: bool = False,
        layer_hook: Callable[[int, Tensor], None] | None = None,
    ):
        h, ctx = self.embed(x, edge_index, batch)
        hidden = [h] if return_hidden else None
        if layer_hook is not None:
            layer_hook(0, h)
        total = Total() if self.readout == "mean" else None
        state = self.run_layers(self.layers, self.layers[0].stepper.init(h), ctx, layer_hook, hidden, total)
        x_out = state.x if total is None else total.value / self.num_layers
        x_out = x_out if self.final_norm is None else norm_fn(self.final_norm, batch)(x_out, None)[0]
        out = self.output(x_out)  # (N, out_channels)
        return (out, hidden) if return_hidden else out

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.in_channels}, {self.hidden_channels}, "
            f"{self.out_channels}, num_layers={self.num_layers}, residual={self.residual!r})"
        )


WavyDIFFormer.__init__.__signature__ = init_signature()  # the keywords of ModelArgs, for help() and tools


_GROUPS = re.compile(r"layers\.\d+\.(force\.alpha|force\.conv\.|stepper\.|norm\.|force\.ffn\.|force\.ffn_norm\."
                     r"|force\.featscale\.|force\.identity\.)")
_GROUP_RANK = {"force.alpha": 0, "force.conv.": 3, "stepper.": 4, "norm.": 5, "force.ffn.": 6, "force.ffn_norm.": 7,
               "force.featscale.": 8, "force.identity.": 9}


def _parameter_group(name: str) -> int:
    """The rank of a parameter's group in :meth:`WavyDIFFormer.named_parameters`."""
    match = _GROUPS.match(name)
    if match:
        return _GROUP_RANK[match.group(1)]
    for rank, start in ((1, "input."), (2, "input_norm."), (10, "final_norm."), (11, "output.")):
        if name.startswith(start):
            return rank
    return 12


#: the state_dict keys of models saved before the layers were modules -> the layers' keys
_FLAT_KEYS = {"convs": "force.conv", "steppers": "stepper", "norms": "norm", "ffns": "force.ffn",
              "ffn_norms": "force.ffn_norm", "featscales": "force.featscale"}
_FLAT_KEY = re.compile(r"(%s)\.(\d+)\.(.*)" % "|".join(_FLAT_KEYS))


def _remap_flat_keys(module, state_dict, prefix, *args) -> None:
    """Load a state_dict saved before the layers were modules: ``convs.i.*``
    -> ``layers.i.force.conv.*`` (likewise the steppers, norms, FFNs and
    FeatScales) and ReZero's ``alpha`` -> every layer's ``force.alpha``."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        rest = key[len(prefix):]
        match = _FLAT_KEY.fullmatch(rest)
        if match:
            name, i, tail = match.groups()
            state_dict[f"{prefix}layers.{i}.{_FLAT_KEYS[name]}.{tail}"] = state_dict.pop(key)
        elif rest == "alpha":
            value = state_dict.pop(key)
            for i in range(len(module.layers)):
                state_dict[f"{prefix}layers.{i}.force.alpha"] = value
