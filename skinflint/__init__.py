"""Skinflint: cost-minimal serving of multi-DNN video-analytics DAGs under an end-to-end SLO."""

__version__ = "0.1.0"
