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

``impl`` picks the implementation: ``"eager"`` (default; for ``light_wave``
the hand-fused autograd function
:func:`~wavygraph.nn.joint.light_wave_joint_layer_norm`) or ``"compile"``.
Compiling is opt-in: measured (README, Performance), it saved only 1-2 % of
a CPU training epoch, and on an H200 it made the second-order kinds slower
(while lowering their peak memory). A failing compile (no C++ compiler, an
unsupported platform) raises :class:`StepCompileError`, which names the
way out (``step_impl="eager"``).

Under autocast, for mixed dtypes, and inside an outer ``torch.compile`` of
the model the plain eager ops run (the outer compile fuses them itself).
Compiled and eager results agree to float rounding (tested).
"""
from __future__ import annotations

import torch
from torch import Tensor

from .joint import JointLayerNorm, joint_layer_norm, light_wave_joint_layer_norm, needs_plain_ops
from .steppers import LightWaveStepper, Stepper, StepState

STEP_IMPLS = ("eager", "compile")


class StepCompileError(RuntimeError):
    """``torch.compile`` of the step and norm failed (toolchain or platform)."""


_compiled: dict[type, object] = {}


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


def step_and_norm(stepper: Stepper, norm: JointLayerNorm, state: StepState, force: Tensor,
                  impl: str = "eager") -> StepState:
    """``norm(*stepper(state, force))``: one step of any stepper followed by
    a :class:`~wavygraph.nn.joint.JointLayerNorm`, compiled or eager as
    ``impl`` says (see the module docstring)."""
    x, v = state
    outer = _is_compiling()
    if outer or (impl == "compile" and not needs_plain_ops(x, v, force, norm.weight)):
        args = (x, v, force, stepper.lam_or_none(force.dtype), norm.weight, norm.bias, stepper.tau, norm.eps)
        if outer:  # an outer torch.compile traces the plain ops and fuses them itself
            return StepState(*_step_and_norm(type(stepper).update, *args))
        try:
            return StepState(*_compiled_for(type(stepper))(*args))
        except torch._dynamo.exc.TorchDynamoException as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise StepCompileError(
                f"torch.compile of the {type(stepper).__name__} step failed ({first}); "
                "use step_impl='eager' (config: model.step_impl=eager), which computes the same"
            ) from err
    if isinstance(stepper, LightWaveStepper):
        return StepState(*light_wave_joint_layer_norm(state, force, stepper, norm))
    return StepState(*norm(*stepper(state, force)))
