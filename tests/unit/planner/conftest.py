import json
from pathlib import Path

from planner.latency import Config
from planner.models import ProblemSpec

# the papers' worked examples (the repo's examples/, docs/design.md §7)
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def example(name: str) -> ProblemSpec:
    return ProblemSpec.model_validate(json.loads((EXAMPLES / f"{name}.json").read_text()))


def gpu_configs(*pairs: tuple[int, float], price: float = 1.0) -> list[Config]:
    """Configs on one hardware 'gpu' at ``price``, in descending t/p order."""
    cs = [Config("gpu", b, 1, d, price) for b, d in pairs]
    return sorted(cs, key=lambda c: -c.ratio)
