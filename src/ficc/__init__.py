"""FICC: a control plane for inference clusters, with federation between clusters."""

__version__ = "0.1.0"
