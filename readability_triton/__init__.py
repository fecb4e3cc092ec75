"""readability-triton: a text readability scorer served on NVIDIA Triton Inference Server."""

__version__ = "0.2.0"
