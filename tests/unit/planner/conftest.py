import json
from pathlib import Path

import pytest

from planner.latency import Config
from planner.models import ProblemSpec

EXAMPLES = Path(__file__).resolve().parents[4] / "shared" / "examples"
LOCAL_EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def example(name: str) -> ProblemSpec:
    for base in (LOCAL_EXAMPLES, EXAMPLES):
        path = base / f"{name}.json"
        if path.exists():
            return ProblemSpec.model_validate(json.loads(path.read_text()))
    pytest.skip(f"example {name} not found")


def gpu_configs(*pairs: tuple[int, float], price: float = 1.0) -> list[Config]:
    """Configs on one hardware 'gpu' at ``price``, in descending t/p order."""
    cs = [Config("gpu", b, 1, d, price) for b, d in pairs]
    return sorted(cs, key=lambda c: -c.ratio)
