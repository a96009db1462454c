"""Nexus's linear batch model and HiTDL's core-count model on synthetic data."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles.fit import fit_hitdl, fit_linear


def test_linear_fit_recovers_exact_line():
    # d(b) = 2 ms * b + 5 ms: d(1)=7, d(2)=9, d(4)=13, d(8)=21 ms
    fit = fit_linear([1, 2, 4, 8], [0.007, 0.009, 0.013, 0.021])
    assert fit.alpha_s == pytest.approx(0.002, rel=1e-9)
    assert fit.beta_s == pytest.approx(0.005, rel=1e-9)
    assert fit.max_rel_err == pytest.approx(0.0, abs=1e-9)
    assert fit.predict(32) == pytest.approx(0.069)  # 2*32 + 5 = 69 ms


def test_linear_fit_reports_relative_error():
    # Two points fit exactly; a third off the line by 10%: b=1 -> 1, b=2 -> 2, b=4 -> 4.4.
    fit = fit_linear([1, 2, 4], [1.0, 2.0, 4.4])
    assert 0 < fit.max_rel_err < 0.10
    assert fit.alpha_s > 0


def test_linear_fit_never_returns_negative_beta():
    # Super-linear points would give beta < 0 in plain least squares; clamp to beta = 0.
    fit = fit_linear([1, 2, 4], [1.0, 2.5, 6.0])
    assert fit.beta_s == 0.0
    assert fit.alpha_s > 0


def test_linear_fit_single_point():
    fit = fit_linear([4], [0.02])  # alpha = 0.02/4 = 5 ms, beta = 0
    assert (fit.alpha_s, fit.beta_s) == (pytest.approx(0.005), 0.0)


@pytest.mark.parametrize("bad", [([], []), ([1, 2], [0.1]), ([1, 2], [0.1, 0.0])])
def test_linear_fit_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        fit_linear(*bad)


def test_hitdl_fit_recovers_three_constants():
    # L(n) = 1 + 8/n + 4/n^2: L(1)=13, L(2)=1+4+1=6, L(4)=1+2+0.25=3.25, L(8)=1+1+0.0625=2.0625
    fit = fit_hitdl([1, 2, 4, 8], [13.0, 6.0, 3.25, 2.0625])
    assert (fit.c0, fit.c1, fit.c2) == (pytest.approx(1.0), pytest.approx(8.0), pytest.approx(4.0))
    assert not fit.degenerate
    assert fit.predict(16) == pytest.approx(1 + 0.5 + 4 / 256)


def test_hitdl_fit_with_two_core_counts_fixes_c2_to_zero():
    # Measured here: n=1 -> 10 ms, n=2 -> 6 ms. Amdahl form c0 + c1/n: c0 + c1 = 10, c0 + c1/2 = 6
    # => c1 = 8, c0 = 2; extrapolated L(4) = 2 + 8/4 = 4 ms, L(8) = 2 + 1 = 3 ms.
    fit = fit_hitdl([1, 2], [0.010, 0.006])
    assert fit.degenerate
    assert (fit.c0, fit.c1, fit.c2) == (pytest.approx(0.002), pytest.approx(0.008), 0.0)
    assert fit.predict(4) == pytest.approx(0.004)
    assert fit.predict(8) == pytest.approx(0.003)


def test_hitdl_fit_constants_are_non_negative():
    # Slower with more cores (contention): no negative c1; the fit is flat instead.
    fit = fit_hitdl([1, 2, 4], [1.0, 1.1, 1.2])
    assert min(fit.c0, fit.c1, fit.c2) >= 0


def test_hitdl_single_core_count_assumes_no_speedup():
    fit = fit_hitdl([2, 2], [0.004, 0.006])
    assert fit.predict(8) == pytest.approx(0.005)  # mean of the two, conservative


def test_linear_fit_minimises_the_largest_relative_error():
    # b=1 -> 10, b=2 -> 12, b=4 -> 14 (concave): no line is exact. The fit must be at least as good as
    # the best line on a fine (alpha, beta) grid.
    fit = fit_linear([1, 2, 4], [10.0, 12.0, 14.0])
    grid = [
        max(abs(a * b + c - d) / d for b, d in ((1, 10.0), (2, 12.0), (4, 14.0)))
        for a in [i * 0.01 for i in range(0, 400)]
        for c in [8.0 + j * 0.01 for j in range(0, 300)]
    ]
    assert fit.max_rel_err <= min(grid) + 1e-9
    assert fit.max_rel_err < 0.05


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.001, 1.0), min_size=2, max_size=7),
)
def test_minimax_fit_never_worse_than_weighted_least_squares(durations):
    batches = [2**i for i in range(len(durations))]
    fit = fit_linear(batches, durations)
    b, d = np.array(batches, float), np.array(durations)
    w = 1.0 / d
    ls = np.linalg.lstsq(np.column_stack([b * w, w]), np.ones_like(d), rcond=None)[0]
    if np.all(ls >= 0):
        ls_err = float(np.max(np.abs(ls[0] * b + ls[1] - d) / d))
        assert fit.max_rel_err <= ls_err + 1e-9
    assert fit.alpha_s >= 0 and fit.beta_s >= 0
