"""PyG-style modules: all-pair attention, residual steppers, joint
(state, velocity) LayerNorm and FFN, and the WavyDIFFormer model."""
from . import functional, fused
from .conv import DIFFormerConv
from .graph import gcn_adjacency
from .joint import JointFFN, JointLayerNorm
from .model import WavyDIFFormer
from .steppers import (
    STEPPERS,
    DiffusionStepper,
    LearnableLamStepper,
    LightWaveStepper,
    MixStepper,
    StepState,
    Stepper,
    WaveStepper,
    make_stepper,
    register_stepper,
    unregister_stepper,
)
from .joint_light_wave import JointLightWaveStepper
from .leapfrog import LeapfrogStepper

__all__ = [
    "functional",
    "fused",
    "DIFFormerConv",
    "gcn_adjacency",
    "JointFFN",
    "JointLayerNorm",
    "WavyDIFFormer",
    "STEPPERS",
    "Stepper",
    "StepState",
    "DiffusionStepper",
    "WaveStepper",
    "MixStepper",
    "LightWaveStepper",
    "JointLightWaveStepper",
    "LeapfrogStepper",
    "LearnableLamStepper",
    "make_stepper",
    "register_stepper",
    "unregister_stepper",
]
