"""Skinflint profiles: profiler, hardware catalog, demo applications and their models, profile store.

Importing this package is cheap (no torch, onnxruntime or boto3): those load inside the functions
that need them.
"""

from profiles.errors import (
    InputShapeError,
    NoBatchDimError,
    NotOnnxError,
    ProfilesError,
    StoreError,
    UnknownHardwareError,
    UnmappedHardwareError,
)
from profiles.hardware import load_catalog, validate_for_deployment
from profiles.store import LayeredStore, LocalStore, ProfileStore, default_store, load_problem

__all__ = [
    "InputShapeError",
    "LayeredStore",
    "LocalStore",
    "NoBatchDimError",
    "NotOnnxError",
    "ProfileStore",
    "ProfilesError",
    "StoreError",
    "UnknownHardwareError",
    "UnmappedHardwareError",
    "default_store",
    "load_catalog",
    "load_problem",
    "validate_for_deployment",
]
