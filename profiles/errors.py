"""Errors raised by ``profiles``. One base class; subclasses carry the data a caller needs.

Every error here is a user-facing failure with a one-line message: the CLI turns a
:class:`ProfilesError` into a :class:`skinflint.errors.UsageError` (one line on stderr, non-zero exit).
"""

from __future__ import annotations

__all__ = [
    "InputShapeError",
    "NoBatchDimError",
    "NotOnnxError",
    "ProfilesError",
    "StoreError",
    "UnknownHardwareError",
    "UnmappedHardwareError",
]


class ProfilesError(Exception):
    """Base class of every error the profiles package raises."""


class NotOnnxError(ProfilesError):
    """The file is missing or is not a loadable ONNX model."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.path = path


class NoBatchDimError(ProfilesError):
    """An input of the model has no dynamic leading (batch) dimension."""

    def __init__(self, message: str, input_name: str = "", shape: tuple[object, ...] = ()):
        super().__init__(message)
        self.input_name = input_name
        self.shape = shape


class InputShapeError(ProfilesError):
    """A non-batch dimension of an input is symbolic and no ``--input-shape`` was given for it."""

    def __init__(self, message: str, input_name: str = ""):
        super().__init__(message)
        self.input_name = input_name


class UnknownHardwareError(ProfilesError):
    """A hardware name is not in the catalog."""

    def __init__(self, message: str, name: str = ""):
        super().__init__(message)
        self.name = name


class UnmappedHardwareError(ProfilesError):
    """A hardware class has no EC2 instance type (P100: AWS never offered it), so it cannot be deployed."""

    def __init__(self, message: str, names: tuple[str, ...] = ()):
        super().__init__(message)
        self.names = names


class StoreError(ProfilesError):
    """A profile store could not read or write an object (missing key, bad JSON, S3 failure)."""

    def __init__(self, message: str, key: str = ""):
        super().__init__(message)
        self.key = key
