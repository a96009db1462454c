"""The benchmarks' errors: a run that cannot start or go on (bad options, no demo applications, a scenario
that cannot be planned). The CLI prints ``str(err)``'s first line and exits non-zero."""

from __future__ import annotations

__all__ = ["BenchError", "OptionError", "ScenarioError"]


class BenchError(Exception):
    """Base of every benchmark error."""


class OptionError(BenchError):
    """A benchmark option out of its range or malformed (``--sizes``, ``--headroom``, ``--target`` ...)."""


class ScenarioError(BenchError):
    """Bad scenario settings (epochs that do not divide the day, no app templates, bad numbers), or demo
    applications that cannot be loaded."""
