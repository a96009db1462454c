# ruff: noqa: F811 - the fixtures imported from the epoch tests are the tests' parameters
"""The control loop sweeps stranded frames every epoch and keeps its cursor in its state (moto)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from core.adapters.results import FrameRecord
from core.ids import new_post_id, request_id
from tests.functional.test_control_epoch import clients, env  # noqa: F401 - fixtures

if TYPE_CHECKING:
    from tests.functional.test_control_epoch import Env

pytestmark = pytest.mark.functional


def test_each_epoch_sweeps_the_due_minutes_once(env: Env) -> None:
    # GIVEN a frame accepted 6 minutes ago (deadline 5 minutes ago) that nothing ever answered
    now = env.clock()
    lost = request_id(new_post_id(now - 300), 0)
    env.ctl.results.create_frames([FrameRecord(lost, "cams", now - 360, now - 300, ("det",))])
    # WHEN an epoch runs
    out = env.ctl.run_epoch()
    # THEN the frame is recorded dropped (stranded) and accounted for; nothing is unaccounted
    assert out.sweep["accepted"] == 1 and out.sweep["stranded"] == 1 and out.sweep["unaccounted"] == 0
    got = env.ctl.results.get_request(lost)
    assert got is not None and got.status == "dropped" and got.tasks[0].reason == "stranded"
    assert env.metrics.total("FramesUnaccounted") == 0
    assert env.metrics.total("FramesStranded", App="cams") == 1
    cursor = env.ctl.states.load().sweep_bucket
    assert cursor is not None and cursor > int((now - 300) // 60)
    # AND the next epoch starts from the cursor: the swept minute is not read again
    env.clock.t += 60
    again = env.ctl.run_epoch()
    assert again.sweep["accepted"] == 0 and env.ctl.states.load().sweep_bucket == cursor + 1
