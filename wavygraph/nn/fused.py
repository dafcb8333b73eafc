r"""The residual step and the joint LayerNorm after it, compiled into a few
fused kernels.

Every layer of :class:`~wavygraph.nn.WavyDIFFormer` ends with
``norm(*stepper(state, force))``: a handful of element-wise ops and a
row-wise normalisation over ``(N, C)`` arrays. Eager PyTorch runs each op as
its own pass through memory, forward and backward, and the second-order kinds
have several more ops than ``diffusion``. ``torch.compile`` (Inductor:
C++/OpenMP on CPU, Triton on GPU) fuses the step and the norm into a couple
of kernels each way, so every kind moves little more than the arrays it must
read and write.

``impl`` picks the implementation:

* ``"auto"`` (default): compiled when the state has at least
  :data:`AUTO_MIN_NUMEL` entries (below that the compile time does not pay
  off); if compiling fails (no C++ compiler, an unsupported platform) one
  warning is given and the eager ops are used from then on.
* ``"compile"``: always compiled; a failure raises.
* ``"eager"``: never compiled (for ``light_wave`` the hand-fused autograd
  function :func:`~wavygraph.nn.joint.light_wave_joint_layer_norm`).

Under autocast, for mixed dtypes, and inside an outer ``torch.compile`` of
the model the plain eager ops run (the outer compile fuses them itself).
Compiled and eager results agree to float rounding (tested).
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

from .joint import JointLayerNorm, joint_layer_norm, light_wave_joint_layer_norm
from .steppers import LightWaveStepper, Stepper, StepState

STEP_IMPLS = ("auto", "compile", "eager")
#: ``"auto"`` compiles from this many state entries (N x C) up:
#: about 16k nodes at 64 channels.
AUTO_MIN_NUMEL = 1 << 20

_compiled: dict[type, object] = {}
_compile_error: list[str] = []  # the first failure under "auto": no further tries


def _is_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return compiler.is_compiling()
    return torch._dynamo.is_compiling()  # pragma: no cover (torch < 2.3)


def _step_and_norm(update, x, v, force, lam, weight, bias, tau: float, eps: float):
    x, v = update(x, v, force, tau, lam)
    return joint_layer_norm(x, v, weight, bias, eps)


def _compiled_for(kind: type[Stepper]):
    fn = _compiled.get(kind)
    if fn is None:
        update = kind.update

        # one function object per kind, so each kind has its own compile cache
        def step_and_norm(x, v, force, lam, weight, bias, tau, eps):
            return _step_and_norm(update, x, v, force, lam, weight, bias, tau, eps)

        step_and_norm.__qualname__ = f"step_and_norm[{kind.__name__}]"
        fn = _compiled[kind] = torch.compile(step_and_norm, dynamic=True)
    return fn


def _can_compile(impl: str, x: Tensor, v: Tensor | None, force: Tensor, norm: JointLayerNorm) -> bool:
    if impl == "eager" or _is_compiling() or torch.is_autocast_enabled(x.device.type):
        return False
    if len({t.dtype for t in (x, force, norm.weight) + (() if v is None else (v,))}) > 1:
        return False
    return impl == "compile" or (not _compile_error and x.numel() >= AUTO_MIN_NUMEL)


def step_and_norm(stepper: Stepper, norm: JointLayerNorm, state: StepState, force: Tensor,
                  impl: str = "auto") -> StepState:
    """``norm(*stepper(state, force))``: one step of any stepper followed by
    a :class:`~wavygraph.nn.joint.JointLayerNorm`, compiled or eager as
    ``impl`` says (see the module docstring)."""
    x, v = state
    lam = stepper.lam_or_none(force.dtype)
    args = (x, v, force, lam, norm.weight, norm.bias, stepper.tau, norm.eps)
    if _can_compile(impl, x, v, force, norm):
        fn = _compiled_for(type(stepper))
        if impl == "compile":
            return StepState(*fn(*args))
        try:
            return StepState(*fn(*args))
        except Exception as err:  # the toolchain, not the inputs: the eager ops below compute the same
            _compile_error.append(f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}")
            warnings.warn(
                f"torch.compile of the residual step failed ({_compile_error[0]}); using eager ops from now on "
                "(same results, slower). Pass step_impl='eager' to skip the attempt.",
                RuntimeWarning,
                stacklevel=2,
            )
    if _is_compiling():
        return StepState(*_step_and_norm(type(stepper).update, *args))
    if isinstance(stepper, LightWaveStepper):
        return StepState(*light_wave_joint_layer_norm(state, force, stepper, norm))
    return StepState(*norm(*stepper(state, force)))
