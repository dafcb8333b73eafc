"""wavygraph: deep graph transformers that do not over-smooth (DIFFormer
attention with Wavy Transformer residual dynamics) on PyTorch Geometric."""
__version__ = "0.1.0"
