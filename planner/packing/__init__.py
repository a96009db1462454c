"""Fleet packing: the planned machines of many apps onto whole instances, one hardware type each.

Every planned machine is a *share*. A share at (near) full load gets its own instance; partial shares of
different modules and apps share an instance when the latency model allows it. docs/packing.md has the
argument; in short:

- An instance runs its shares' batches one at a time in the order their windows close (FIFO; a share
  with concurrency ``c`` may overlap with others, which only finishes batches earlier). A share's
  batches become ready at its windows' ends; a *co-locatable* share's windows are exactly periodic
  (one configuration per module, equal machines: every machine's windows are evenly spaced; or the
  residual of :func:`planner.fleet.split_residual`: one window per period), so it offers at most
  ``1 + x f / b`` batches in any interval of length ``x``.
- With ``busy_j = d_j f_j / b_j`` (the fraction of time share ``j`` holds the device if it ran alone,
  one batch at a time) and ``sum busy_j <= 1``, a FIFO server completes a batch that becomes ready at
  ``a`` by ``a + sum_j d_j`` (network calculus: work arrived in ``[s, a]`` is at most
  ``sum_j d_j (1 + (a - s) f_j / b_j) = D + (a - s) U``). So co-location adds at most
  ``added_wait_i = sum_{j != i} d_j`` to share ``i``'s worst case, whatever the phases of the schedules.
- Each app's path slack (SLO minus the path's planned worst case) is shared among the modules that have
  co-locatable shares on that path; a share joins an instance only if every share there stays within
  its module's allowance.

Packing is best-fit decreasing by busy fraction (Nexus's squishy bin packing, with the condition above in
place of its duty-cycle merge), after keeping the previous epoch's instances whose shares are unchanged.

With ``align``, modules served by one machine first take turns in *aligned duty cycles* (Nexus's
merge): the shares of an instance run one batch each per common cycle (the shortest of their batch
intervals; the others' rates are raised to it, each share in the configuration with the shortest batch
that still carries its rate), at phases the packer chooses so that the turns do not overlap. Their added
wait is then 0 while the phases are honoured (``schedule_phase_s`` in the plan, see
:func:`apply_phases` and :func:`planner.dispatch.schedule_origin`); if they are not, the FIFO bound above
still holds (``fifo_wait_s``), because ``sum d <= cycle`` implies ``sum busy <= 1``.

Modules: :mod:`.models` (shares, instances, the fleet plan), :mod:`.shares` (a plan's shares and
allowances), :mod:`.binpack` (the packer), :mod:`.phases` (aligned turns), :mod:`.check` (the checker),
:mod:`.replay` (replay of one instance).
"""

from __future__ import annotations

from planner.packing.binpack import ALIGN_GUARD_S, REPACK_THRESHOLD, pack
from planner.packing.check import check_fleet
from planner.packing.models import FleetPlan, Instance, PackingError, Share
from planner.packing.phases import adversarial_phases, aligned_phases, apply_phases
from planner.packing.replay import ShareReplay, simulate_instance
from planner.packing.shares import allowances, colocatable_groups, plan_shares

__all__ = [
    "ALIGN_GUARD_S",
    "FleetPlan",
    "Instance",
    "PackingError",
    "REPACK_THRESHOLD",
    "Share",
    "ShareReplay",
    "adversarial_phases",
    "aligned_phases",
    "allowances",
    "apply_phases",
    "check_fleet",
    "colocatable_groups",
    "pack",
    "plan_shares",
    "simulate_instance",
]
