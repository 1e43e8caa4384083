"""amplint: find and fix PyTorch mixed-precision (AMP) mistakes."""

__version__ = "0.1.0"
