"""Benchmarks: each prints figures and writes a dated page under docs/results/ (``skinflint bench ...``)."""
