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
    LightWaveStepper,
    MixStepper,
    StepState,
    Stepper,
    WaveStepper,
    make_stepper,
)

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
    "make_stepper",
]
