"""The arguments of :class:`~wavygraph.nn.WavyDIFFormer`: one dataclass,
:class:`ModelArgs`, holds every argument's default, and
:func:`check_model_args` every check.

The model's keyword arguments, the config's ``model`` keys
(:class:`wavygraph.config.ModelConfig` extends :class:`ModelArgs` with the
baselines' keys) and so the command line all resolve through it:
``WavyDIFFormer(in, hidden, out)`` and ``wavygraph train`` with no ``model.``
keys build the same model. The defaults are DIFFormer's layer
(`Wu et al., ICLR 2023 <https://arxiv.org/abs/2301.09474>`_) with dropout
0.2, the model the committed configs and sweeps were written against;
:data:`DIFFORMER_ARGS` gives DIFFormer's own model (no dropout) and
:data:`RECIPE_ARGS` the depth recipe's (docs/benchmarks.md). ``tau=None``
and ``residual_options=None`` take the kind's own choice, the class
attributes ``default_tau`` and ``default_options`` of its stepper
(:class:`~wavygraph.nn.steppers.Stepper`).

Every check raises a one-line :class:`~wavygraph.nn.validate.InputError`
that names the argument as its caller spells it (:class:`Spelling`:
``tau`` from Python, ``model.tau`` in a config), with one wording for a bad
choice: ``unknown <name> <value>; choose one of ...``.
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Dict, NamedTuple, Optional

from wavygraph.checks import check_positive_int

from .conv import LOCALS
from .functional import KERNELS, QK_NORMS
from .joint_ffn import ACTIVATIONS
from .joint_norm import NORMS
from .steppers import STEPPERS, make_stepper
from .steppers.compiled import STEP_IMPLS
from .validate import InputError, check_choice

DROPOUT_AT = ("state", "force")
FORCE_SCALES = ("fixed", "rezero")
#: What the output layer reads: the last state, or the mean of the layers' output states.
READOUTS = ("last", "mean")


@dataclass
class ModelArgs:
    """Every argument of :class:`~wavygraph.nn.WavyDIFFormer` but the input
    and output sizes, with its default (documented there)."""

    num_layers: int = 3
    hidden_channels: int = 64
    residual: str = "diffusion"  # a registered kind: wavygraph.nn.STEPPERS (plugins: the config's `imports`)
    residual_options: Optional[Dict[str, Any]] = field(default_factory=dict)  # {}: the kind's own; None: its recipe's
    heads: int = 1
    kernel: str = "simple"
    qk_norm: Optional[str] = None  # None: the kernel's own (global for simple, none for sigmoid)
    use_graph: bool = True
    graph_weight: Optional[float] = None  # None: the local branch added (DIFFormer); else the blend weight
    value_proj: bool = True  # false: values = the layer input (DIFFormer's --use_weight off)
    local: str = "gcn"  # the local branch: "gcn" (DIFFormer's) or "sep" (ego and neighbour weights apart)
    input_norm: bool = True  # LayerNorm after the input layer (DIFFormer's --use_bn)
    source: bool = False  # add x_0 to every layer before its norm (DIFFormer's --use_source)
    source_weight: Optional[float] = 1.0  # weight alpha of the added x_0 (None: 0.25), only with source
    tau: Optional[float] = 0.5  # step size; None: the kind's default_tau
    tau_layers: Optional[int] = None  # tau is the step at this depth; at L layers tau * tau_layers / L
    input_dropout: float = 0.0  # dropout of the raw features before the input layer
    dropout: float = 0.2
    layer_dropout: Optional[float] = None  # None: same as dropout
    dropout_at: str = "state"  # "state" (DIFFormer) or "force" (the Wavy authors: attention output, FFN branches)
    ffn: bool = False
    ffn_activation: str = "gelu"
    force_scale: str = "fixed"
    norm: str = "layer"
    featscale: bool = False
    step_impl: str = "eager"  # or "compile": torch.compile the step + LayerNorm (same results)
    shared_attention: bool = False  # one attention layer for all steps (parameters independent of depth)
    identity_map: Optional[float] = None  # GCNII's lambda: a per-layer weight on the attention output
    readout: str = "last"  # what the output layer reads: "last" (X_L) or "mean" (the mean of X_1 .. X_L)
    # memory in depth (docs/fidelity.md): recompute layers in backward (same scores), or invert them
    gradient_checkpointing: bool = False  # checkpoint segments of layers in training
    checkpoint_segments: Optional[int] = None  # number of segments (None: ceil(sqrt(num_layers)))
    reversible: bool = False  # gradients by inverting the steps, no stored layer state (kinds with an inverse)

    def step_size(self) -> float:
        """``tau``, or the kind's ``default_tau`` when it is None; with
        ``tau_layers`` scaled by ``tau_layers / num_layers``, so that every
        depth integrates the same time span ``tau * tau_layers``."""
        tau = STEPPERS[self.residual].default_tau if self.tau is None else self.tau
        return tau if self.tau_layers is None else tau * self.tau_layers / self.num_layers

    def kind_options(self) -> dict:
        """``residual_options``, or the kind's ``default_options`` when None."""
        options = STEPPERS[self.residual].default_options if self.residual_options is None else self.residual_options
        return dict(options)


#: DIFFormer's own model (``x = LN(0.5 conv(x) + 0.5 x)``, then dropout;
#: ``residual_options={}``: every kind's own options, e.g. ``mix`` from lam0 0.5)
DIFFORMER_ARGS = dict(graph_weight=None, value_proj=True, source=False, source_weight=1.0, tau=0.5, dropout=0.0,
                      dropout_at="state", shared_attention=False, residual_options={})
#: The depth recipe's model settings, chosen by validation accuracy in the usual PyG loop at 4 and 16 layers
#: (``benchmarks/pyg_loop.py``, docs/benchmarks.md): one shared attention layer whose values are the layer input,
#: its local branch blended 0.9, dropout 0.2 inside the force, 0.25 X_0 added before every norm, each kind's
#: step and options (``default_tau``, ``default_options``)
RECIPE_ARGS = dict(graph_weight=0.9, value_proj=False, source=True, source_weight=None, tau=None, dropout=0.2,
                   dropout_at="force", shared_attention=True, residual_options=None)


class Spelling(NamedTuple):
    """How a message spells an argument: ``prefix`` before its name
    (``"model."`` in a config) and ``true``/``false``/``null`` for YAML."""

    prefix: str = ""
    yaml: bool = False

    def key(self, name: str) -> str:
        return self.prefix + name

    def value(self, value) -> str:
        if self.yaml and (isinstance(value, bool) or value is None):
            return {True: "true", False: "false", None: "null"}[value]
        return repr(value)

    def set(self, name: str, value) -> str:
        """``name=value`` as the caller writes it."""
        return f"{self.key(name)}={self.value(value)}"


PYTHON = Spelling()


def _is_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def check_model_args(args: ModelArgs, spell: Spelling = PYTHON) -> None:
    """Check every argument of ``args``; a one-line :class:`InputError`
    naming the argument as ``spell`` writes it."""
    key = spell.key
    for name in ("num_layers", "hidden_channels", "heads"):
        check_positive_int(key(name), getattr(args, name), InputError)
    if args.tau_layers is not None:
        check_positive_int(key("tau_layers"), args.tau_layers, InputError)
    for name, choices in (("residual", STEPPERS), ("kernel", KERNELS), ("dropout_at", DROPOUT_AT),
                          ("ffn_activation", ACTIVATIONS), ("force_scale", FORCE_SCALES), ("norm", NORMS),
                          ("step_impl", STEP_IMPLS), ("local", LOCALS),
                          ("readout", READOUTS)):
        check_choice(key(name), getattr(args, name), choices)
    if args.qk_norm is not None:
        check_choice(key("qk_norm"), args.qk_norm, QK_NORMS)
    for name in ("input_dropout", "dropout", "layer_dropout"):
        value = getattr(args, name)
        if value is not None and not (_is_number(value) and 0.0 <= value < 1.0):
            raise InputError(f"{key(name)} must lie in [0, 1), got {spell.value(value)}")
    if args.graph_weight is not None and not (_is_number(args.graph_weight) and 0.0 <= args.graph_weight <= 1.0):
        raise InputError(f"{key('graph_weight')} must lie in [0, 1] or be {spell.value(None)}, "
                         f"got {spell.value(args.graph_weight)}")
    if args.local == "sep" and not args.use_graph:
        raise InputError(f"{spell.set('local', 'sep')} needs {spell.set('use_graph', True)} "
                         "(it is a kind of local branch)")
    for name, hint in (("tau", ""), ("identity_map", " (GCNII's lambda, e.g. 0.5)")):
        value = getattr(args, name)
        if value is not None and not (_is_number(value) and math.isfinite(value) and value > 0):
            raise InputError(f"{key(name)} must be a positive number{hint} or {spell.value(None)}, "
                             f"got {spell.value(value)}")
    _check_source(args, spell)
    _check_options(args, spell)
    _check_memory(args, spell)


def _check_source(args: ModelArgs, spell: Spelling) -> None:
    weight = args.source_weight
    if weight is None:
        return
    if not (_is_number(weight) and 0.0 <= weight < float("inf")):
        raise InputError(f"{spell.key('source_weight')} must be a number >= 0, got {spell.value(weight)}")
    if not args.source and weight != 1.0:
        raise InputError(f"{spell.set('source_weight', weight)} needs {spell.set('source', True)} "
                         "(it weights the added x_0)")


def _check_options(args: ModelArgs, spell: Spelling) -> None:
    """The kind's options, checked by building one stepper (its own messages)."""
    options = args.residual_options
    if options is not None and not isinstance(options, Mapping):
        raise InputError(f"{spell.key('residual_options')} must be a dict of the kind's options, "
                         f"got {spell.value(options)}")
    try:
        make_stepper(args.residual, 1, args.step_size(), **args.kind_options())
    except (ValueError, TypeError) as exc:
        raise InputError(f"{spell.key('residual_options')}: {str(exc).splitlines()[0]}") from None


def _check_memory(args: ModelArgs, spell: Spelling) -> None:
    """The memory options, which depend on the kind (``reversible`` needs an inverse)."""
    for name in ("gradient_checkpointing", "reversible"):
        value = getattr(args, name)
        if not isinstance(value, bool):
            raise InputError(f"{spell.key(name)} must be {spell.value(True)} or {spell.value(False)}, "
                             f"got {value!r}")
    segments = args.checkpoint_segments
    if segments is not None and not (_is_number(segments) and isinstance(segments, int) and segments >= 1):
        raise InputError(f"{spell.key('checkpoint_segments')} must be a positive integer or "
                         f"{spell.value(None)}, got {segments!r}")
    if segments is not None and not args.gradient_checkpointing:
        raise InputError(f"{spell.set('checkpoint_segments', segments)} needs "
                         f"{spell.set('gradient_checkpointing', True)}")
    if args.reversible and not STEPPERS[args.residual].invertible:
        invertible = [name for name, cls in STEPPERS.items() if cls.invertible]
        raise InputError(f"{spell.set('reversible', True)} needs a residual kind with an inverse "
                         f"({', '.join(map(repr, invertible))}), got {args.residual!r}")
    if args.reversible and args.gradient_checkpointing:
        raise InputError(f"{spell.set('reversible', True)} already stores no layer state; "
                         f"set {spell.set('gradient_checkpointing', False)}")


def model_args(hidden_channels: int, kwargs: dict) -> ModelArgs:
    """:class:`ModelArgs` from the model's keyword arguments; an unknown one is a :class:`TypeError`."""
    names = {f.name for f in fields(ModelArgs)}
    unknown = [k for k in kwargs if k not in names]
    if unknown:
        raise TypeError(f"WavyDIFFormer() got an unexpected keyword argument {unknown[0]!r}")
    return ModelArgs(hidden_channels=hidden_channels, **kwargs)


def init_signature() -> inspect.Signature:
    """The signature of ``WavyDIFFormer.__init__``: the sizes, then every
    :class:`ModelArgs` field (but ``hidden_channels``) as a keyword with its default."""
    P = inspect.Parameter
    params = [P(n, P.POSITIONAL_OR_KEYWORD) for n in ("self", "in_channels", "hidden_channels", "out_channels")]
    for f in fields(ModelArgs):
        if f.name != "hidden_channels":
            default = f.default_factory() if f.default is MISSING else f.default
            params.append(P(f.name, P.KEYWORD_ONLY, default=default, annotation=f.type))
    return inspect.Signature(params)
