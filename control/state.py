"""The control loop's own state between epochs (the planner Lambda keeps no memory): epoch number
and time, observed-rate history per app, the hysteresis state, hardware that could not be had, the
backlog corrections waiting for the next epoch, the sweeper's cursor, the admission reserves chosen
again for apps whose rate moved away from the one their ``shed_target`` was met at, and the last
epoch's summary (``skinflint status`` shows it). One item, ``control#state``, written with a
condition on the epoch number read, so two planners never run one epoch twice."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from control.errors import ControlError
from core.adapters.config_items import ConfigItems, ItemConflictError
from core.errors import ConfigError

__all__ = ["ControlState", "EpochTakenError", "ReserveChoice", "StateStore"]

STATE_KEY = "control#state"


class EpochTakenError(ControlError):
    """Another planner wrote the state since it was read (it runs this epoch)."""


class ReserveChoice(BaseModel):
    """An ``admission_reserve`` the control loop chose for an app's ``shed_target`` at another rate
    than the registered one (control/reserves.py); it replaces the registration's choice
    for the app revision it was made for."""

    reserve: float = Field(ge=0)
    rate: float = Field(gt=0)  # frames/s the Poisson simulation offered
    shed: float = Field(ge=0)  # what the reserve's plan shed there
    met: bool  # shed <= the app's shed_target (else the least shed of the reserves tried)
    revision: int  # the app revision it applies to
    at: float  # epoch s of the review


class ControlState(BaseModel):
    epoch: int = 0
    last_epoch_at: float | None = None  # epoch s when the last epoch started (planned or not)
    history: dict[str, list[float]] = Field(default_factory=dict)  # app -> observed frames/s, oldest first
    hysteresis: dict[str, Any] = Field(default_factory=dict)  # planner.scaling.Hysteresis.to_dict()
    unavailable: dict[str, float] = Field(default_factory=dict)  # hardware -> until (epoch s)
    unavailable_why: dict[str, str] = Field(default_factory=dict)
    asg_names: dict[str, str] = Field(default_factory=dict)
    last: dict[str, Any] = Field(default_factory=dict)  # the last epoch's summary
    observed_until: float | None = None  # end of the rate window last appended to ``history`` (epoch s)
    # backlog correction between epochs (control/epoch.py, Controller.check_backlog):
    boosts: dict[str, float] = Field(default_factory=dict)  # app -> rate factor for the next epoch only
    corrected_at: dict[str, float] = Field(default_factory=dict)  # app -> last correction (epoch s)
    last_check: dict[str, Any] = Field(default_factory=dict)  # the last backlog check's summary
    # service-time corrections (control/calibration.py): app -> "module@hardware" -> s
    corrections: dict[str, dict[str, float]] = Field(default_factory=dict)
    corrections_low: dict[str, dict[str, list[float]]] = Field(default_factory=dict)  # shrink streaks
    reserves: dict[str, ReserveChoice] = Field(default_factory=dict)  # app -> reserve chosen again
    # measured hops (control/hops.py): app -> module -> s (a module not here is planned with the default)
    hops: dict[str, dict[str, float]] = Field(default_factory=dict)
    # the stranded-frame sweeper (control/sweeper.py): the first deadline minute not swept yet
    sweep_bucket: int | None = None


class StateStore:
    """The control state on the config table (:class:`core.adapters.config_items.ConfigItems`)."""

    def __init__(self, items: ConfigItems):
        self._items = items

    def load(self) -> ControlState:
        try:
            item = self._items.get(STATE_KEY)
        except ConfigError as exc:
            raise ControlError(f"cannot read the control state: {exc}") from exc
        return ControlState.model_validate_json(item["doc"]) if item else ControlState()

    def save(self, state: ControlState, expected_epoch: int | None) -> None:
        """Write ``state`` if the stored epoch is still ``expected_epoch`` (None: no state yet)."""
        values = {"epoch": state.epoch, "doc": state.model_dump_json()}
        condition = None if expected_epoch is None else ("epoch", expected_epoch)
        try:
            self._items.put(STATE_KEY, values, if_equal=condition, if_new=expected_epoch is None)
        except ItemConflictError as exc:
            raise EpochTakenError(f"another planner ran epoch {state.epoch}") from exc
        except ConfigError as exc:
            raise ControlError(f"cannot write the control state: {exc}") from exc
