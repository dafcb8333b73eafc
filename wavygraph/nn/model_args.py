"""The arguments of :class:`~wavygraph.nn.WavyDIFFormer`: their choices,
the per-kind defaults, DIFFormer's own set and the checks (one-line
:class:`~wavygraph.nn.validate.InputError` messages)."""
from __future__ import annotations

from collections.abc import Mapping

from wavygraph.checks import check_positive_int

from .joint_norm import NORMS
from .steppers import STEPPERS
from .steppers.compiled import STEP_IMPLS
from .validate import InputError, check_choice

DROPOUT_AT = ("state", "force")
FORCE_SCALES = ("fixed", "rezero")
#: ``tau=None`` and ``residual_options=None`` take each kind's step and options from here (chosen by validation
#: accuracy in the usual PyG loop, docs/benchmarks.md); a kind not listed steps 0.5 with its own options
KIND_TAU = {"diffusion": 1.0, "wave": 0.5, "mix": 1.0, "light_wave": 1.0, "light_wave_joint": 0.5}
KIND_OPTIONS = {"mix": {"lam0": 0.1}}
#: the arguments that turn the defaults into DIFFormer's own model: the defaults of the config's ``model`` keys
#: (``residual_options={}``: every kind's own options, e.g. ``mix`` from lam0 0.5)
DIFFORMER_ARGS = dict(graph_weight=None, value_proj=True, source=False, source_weight=1.0, tau=0.5, dropout=0.0,
                      dropout_at="state", shared_attention=False, residual_options={})


def check_model_args(in_channels, hidden_channels, out_channels, num_layers, residual, residual_options,
                     rates, dropout_at, force_scale, norm, step_impl, source, source_weight) -> None:
    """Check the arguments of :class:`~wavygraph.nn.WavyDIFFormer` (``rates``:
    input_dropout, dropout, layer_dropout); a one-line :class:`InputError`."""
    for name, value in (
        ("in_channels", in_channels),
        ("hidden_channels", hidden_channels),
        ("out_channels", out_channels),
        ("num_layers", num_layers),
    ):
        check_positive_int(name, value, InputError)
    check_choice("residual", residual, STEPPERS)
    if residual_options is not None and not isinstance(residual_options, Mapping):
        raise InputError(f"residual_options must be a dict of the kind's options, got {residual_options!r}")
    check_choice("dropout_at", dropout_at, DROPOUT_AT)
    check_choice("force_scale", force_scale, FORCE_SCALES)
    check_choice("norm", norm, NORMS)
    check_choice("step_impl", step_impl, STEP_IMPLS)
    for name, value in zip(("input_dropout", "dropout", "layer_dropout"), rates):
        if value is not None and not 0.0 <= value < 1.0:
            raise InputError(f"{name} must lie in [0, 1), got {value!r}")
    if source_weight is None:
        return
    if isinstance(source_weight, bool) or not isinstance(source_weight, (int, float)) \
            or not 0.0 <= source_weight < float("inf"):
        raise InputError(f"source_weight must be a number >= 0, got {source_weight!r}")
    if not source and source_weight != 1.0:
        raise InputError(f"source_weight={source_weight!r} needs source=True (it weights the added x_0)")
