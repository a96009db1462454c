# ruff: noqa: F811 - the fixtures imported from the epoch tests are the tests' parameters
"""Activation gated on readiness, on moto: a version published over a serving one activates once
every slot is held by an instance that loaded it (moved earlier, conditionally on the pointer), at
its deadline otherwise (saying which slots were not ready); a version published before the previous
one activated keeps the version actually served as ``previous``; the backlog event routes to the
check, which is what activates a ready version between epochs; registration checks feasibility
with the epoch's solver."""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

import pytest

from control.service import BACKLOG_CHECK, handle_event
from core.adapters.plan_store import VersionConflictError
from tests.functional.test_control_epoch import SPEC, clients, env, serve_every_slot  # noqa: F401

if TYPE_CHECKING:
    from core.adapters.plan_store import Manifest
    from tests.functional.test_control_epoch import Env

LEAD, MAX_LEAD, NOTICE = 15.0, 180.0, 3.0  # ControlConfig defaults


def serving_then_grown(env: Env) -> tuple[int, Manifest]:
    """v1 published and served by an instance per slot; then three times the load: v2 is published
    over it (more instances). Returns v1 and v2's manifest."""
    env.register(SPEC)
    first = env.ctl.run_epoch()
    assert first.status == "published" and first.activate_at == pytest.approx(env.clock() + LEAD)
    v1 = first.version
    assert v1 is not None
    serve_every_slot(env, v1)
    env.frames("cams", 25.0, shed=35.0)
    env.clock.t += 60
    assert env.ctl.run_epoch().status == "unchanged"  # observed from its first whole window on
    env.frames("cams", 25.0, shed=35.0)
    env.clock.t += 60
    grown = env.ctl.run_epoch()
    assert grown.status == "published" and grown.previous == v1, grown.as_json()
    cur = env.ctl.plans.current()
    assert cur is not None and cur.version == grown.version
    return v1, cur


def test_a_new_version_activates_once_every_slot_is_served(env: Env) -> None:
    # GIVEN v2, published gated: at its deadline unless its slots are served before
    v1, m2 = serving_then_grown(env)
    t_pub = env.clock()
    assert m2.gated and m2.activate_by == pytest.approx(t_pub + MAX_LEAD) and m2.activate_at == m2.activate_by
    assert m2.serving(t_pub + 60) == v1  # the front keeps dispatching on v1
    env.clock.t += 2
    # WHEN the instances claim and load every slot but one
    served = serve_every_slot(env, m2.version, skip=1)
    check = env.ctl.check_activation()
    # THEN the version still waits, naming the missing slot
    assert check.status == "waiting" and check.ready == len(served) and len(check.missing) == 1
    assert list(check.missing.values()) == ["unclaimed"]
    assert env.ctl.plans.current() == m2
    # WHEN the last one is served (every instance heartbeats after loading), 4 s after publishing
    env.clock.t += 2
    serve_every_slot(env, m2.version)
    check = env.ctl.check_activation()
    # THEN activation moves to the lead after publishing (the notice is shorter than what is left)
    assert check.status == "ready" and not check.missing
    cur = env.ctl.plans.current()
    assert cur is not None and cur.version == m2.version and cur.previous == v1
    assert cur.activate_at == pytest.approx(t_pub + LEAD) and cur.activation == "ready"
    assert cur.ready_at == pytest.approx(t_pub + 4) and not cur.gated
    assert cur.serving(t_pub + LEAD - 0.01) == v1 and cur.serving(t_pub + LEAD) == m2.version
    # the version's items are unchanged (readers see the same plan); its manifest item follows
    assert {d.version for d in env.ctl.plans.deployments(m2.version).values()} == {m2.version}
    stored = env.ctl.plans.manifest(m2.version)
    assert stored is not None and stored.activate_at == pytest.approx(t_pub + LEAD)
    assert env.metrics.values("ActivationSeconds") == [pytest.approx(LEAD)]
    # the rewrite is conditional on the manifest read: a stale check loses, a later check is a no-op
    with pytest.raises(VersionConflictError):
        env.ctl.plans.set_activation(m2, t_pub + 5)
    assert env.ctl.check_activation().status == "active"
    assert env.ctl.plans.current() == cur


def test_served_late_it_activates_after_a_short_notice(env: Env) -> None:
    _, m2 = serving_then_grown(env)
    env.clock.t += 100  # the new instances took 100 s to boot
    serve_every_slot(env, m2.version)
    assert env.ctl.check_activation().status == "ready"
    cur = env.ctl.plans.current()
    assert cur is not None and cur.activate_at == pytest.approx(env.clock() + NOTICE)


def test_a_version_not_served_by_its_deadline_activates_anyway_and_says_what_was_missing(
    env: Env,
) -> None:
    v1, m2 = serving_then_grown(env)
    fleet = env.ctl.plans.fleet(m2.version)
    assert fleet is not None
    serve_every_slot(env, m2.version, skip=2)  # two slots wait for instances that never come
    env.clock.t += 60
    assert env.ctl.check_backlog().status == "activating"
    env.clock.t = m2.activate_at + 5
    serve_every_slot(env, m2.version, skip=2)  # the others keep heartbeating
    out = env.ctl.check_activation()
    cur = env.ctl.plans.current()
    assert out.status == "deadline" and len(out.missing) == 2
    assert cur is not None and cur.activation == "deadline" and cur.activate_at == m2.activate_at
    assert len(cur.unready) == 2 and all(u.endswith(": unclaimed") for u in cur.unready)
    assert cur.serving(env.clock()) == m2.version
    assert env.metrics.values("ActivationUnreadySlots") == [2]
    assert env.ctl.check_activation().status == "active"  # recorded once


def test_a_version_published_before_the_previous_one_activated_keeps_the_served_one(env: Env) -> None:
    # GIVEN v2 waiting for its instances (v1 is served)
    v1, m2 = serving_then_grown(env)
    before = env.desired()
    v1_counts = env.ctl.plans.manifest(v1).counts  # type: ignore[union-attr]
    # WHEN the load grows again and an epoch publishes v3 before v2 activated
    env.frames("cams", 80.0, shed=40.0)
    env.clock.t += 60
    out = env.ctl.run_epoch()
    # THEN v3's previous is v1, which the front keeps serving (never the unready v2), and v3 keeps
    # v2's deadline: a run of publishes cannot hold the front on v1 for longer than the max lead
    assert out.status == "published" and out.previous == v1, out.as_json()
    m3 = env.ctl.plans.current()
    assert m3 is not None and m3.version == out.version and m3.previous == v1
    assert m3.activate_by == pytest.approx(m2.activate_by) and m3.gated
    assert m3.serving(env.clock()) == v1
    # the groups never shrink below what v1 (still served) needs
    assert all(env.desired()[hw] >= n for hw, n in v1_counts.items())
    assert sum(env.desired().values()) >= sum(before.values())
    # and v3 activates once its own slots are served
    serve_every_slot(env, m3.version)
    assert env.ctl.check_activation().status == "ready"
    cur = env.ctl.plans.current()
    assert cur is not None and cur.activate_at == pytest.approx(env.clock() + NOTICE)


def test_the_epoch_waits_briefly_for_the_slots_when_told(env: Env) -> None:
    # the Lambda's setting: after publishing, check the slots every 2 s for up to 20 s
    from dataclasses import replace

    env.ctl.config = replace(env.ctl.config, activate_wait_s=20.0)
    env.register(SPEC)
    v1 = env.ctl.run_epoch().version
    assert v1 is not None
    serve_every_slot(env, v1)
    env.frames("cams", 25.0, shed=35.0)
    env.clock.t += 60
    assert env.ctl.run_epoch().status == "unchanged"
    env.frames("cams", 25.0, shed=35.0)
    env.clock.t += 60
    published = env.clock()
    sleeps: list[float] = []

    def sleep(s: float) -> None:  # the instances load the new version during the second wait
        sleeps.append(s)
        env.clock.t += s
        if len(sleeps) == 2:
            cur = env.ctl.plans.current()
            assert cur is not None
            serve_every_slot(env, cur.version)

    env.ctl.sleep = sleep
    out = env.ctl.run_epoch()
    assert out.status == "published" and sleeps == [2.0, 2.0]
    assert out.activation["status"] == "ready" and out.activate_at == pytest.approx(published + LEAD)


def test_the_backlog_event_runs_the_check_and_activates_a_served_version(env: Env) -> None:
    _, m2 = serving_then_grown(env)
    epoch = env.ctl.states.load().epoch
    env.clock.t += 3
    serve_every_slot(env, m2.version)
    out = handle_event(env.ctl, {"source": BACKLOG_CHECK, "detail-type": "Backlog check"})
    assert out["status"] == "activating" and out["activation"]["status"] == "ready", out
    assert env.ctl.states.load().epoch == epoch  # a check, not an epoch
    env.clock.t += LEAD
    quiet = handle_event(env.ctl, {"source": BACKLOG_CHECK})
    assert quiet["status"] == "quiet" and quiet["queues"] > 0 and "activation" not in quiet
    assert env.ctl.states.load().last_check["status"] == "quiet"
    # anything else is still an epoch
    env.clock.t += 60
    assert (
        handle_event(env.ctl, {"source": "aws.events", "detail-type": "Scheduled Event"})["epoch"]
        == epoch + 1
    )


def test_registration_checks_feasibility_with_the_epochs_solver(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    import planner.robust
    from control.errors import RegistrationError
    from planner.errors import InfeasibleError

    seen: list[float] = []
    real = planner.robust.solve_dispatchable

    def spy(problem: Any, **kw: Any) -> Any:
        seen.append(problem.modules["det"].rate)
        return real(problem, **kw)

    monkeypatch.setattr(planner.robust, "solve_dispatchable", spy)
    t0 = time.perf_counter()
    env.register(SPEC)
    took = time.perf_counter() - t0
    # checked at the rate the first epoch plans (20 frames/s + 10 % headroom, quantised up)
    assert seen and seen[0] >= 20.0 * 1.1
    out = env.ctl.run_epoch()
    assert out.status == "published" and not out.failed_apps
    assert seen[-1] == seen[0] == pytest.approx(out.rates["cams"]["planned"], abs=1e-4)  # the same problem
    print(f"registration with the dispatch-aware feasibility check: {took * 1e3:.0f} ms")

    def infeasible(problem: Any, **kw: Any) -> Any:
        raise InfeasibleError("no realisable plan")

    monkeypatch.setattr(planner.robust, "solve_dispatchable", infeasible)
    with pytest.raises(RegistrationError) as err:
        env.register(copy.deepcopy(SPEC) | {"name": "other"})
    assert "cannot be planned at 20 frames/s within slo_s 0.5: no realisable plan" in str(err.value)
    assert "dispatch-aware" in str(err.value)
