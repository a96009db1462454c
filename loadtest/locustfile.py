"""Skinflint's locustfile: one camera user class per demo app and the selected load shape.

    SKINFLINT_API_KEY=KEY SKINFLINT_SHAPE=steady SKINFLINT_RATE=4 SKINFLINT_DURATION_S=300 \
        locust -f loadtest/locustfile.py --host URL --headless TrafficUser

``skinflint loadtest`` sets these for you (docs/loadtest.md). Environment:

- ``SKINFLINT_API_KEY``: sent as ``x-api-key``;
- ``SKINFLINT_SHAPE`` (steady, ramp, diurnal, burst), ``SKINFLINT_RATE`` (frames/s per app at the
  peak), ``SKINFLINT_DURATION_S``, ``SKINFLINT_APPS_N`` (user classes given on the command line),
  ``SKINFLINT_DRAIN_S`` (seconds to collect the last results), ``SKINFLINT_FPS_PER_USER``,
  ``SKINFLINT_FRAMES_PER_POST`` (1-10 frames per POST, as JSON batches; 0 or unset: the frames of
  half the app's SLO at a camera's rate, within 1-10);
- ``SKINFLINT_LOADTEST_OUT``: where every frame's outcome is written (JSON lines).

Pick the apps by naming their user classes (``TrafficUser FaceUser ...``); without names every
class runs and every app must be deployed.
"""

from loadtest.shapes import SelectedShape
from loadtest.users import ActdetUser, CaptionUser, FaceUser, PoseUser, TrafficUser

__all__ = ["ActdetUser", "CaptionUser", "FaceUser", "PoseUser", "SelectedShape", "TrafficUser"]
