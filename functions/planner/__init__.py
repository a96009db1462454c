"""The planner Lambda function (``handler.py``). The planning itself is pure (``planner/``); the
epoch that drives it is in :mod:`functions.control`."""
