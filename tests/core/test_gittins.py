"""Gittins index against a brute-force evaluation of the formula on discrete distributions."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core import CoreError, ServiceDistribution
from coordinator.sim.data import resolve_trace


def brute(samples: list[int], a: int, delta: int | None, variant: str) -> Fraction:
    """The definition, evaluated exactly: P(S−a ≤ Δ | S>a) / E[min(S−a, Δ) | S>a], sup over Δ
    when ``delta`` is None. "authors": E sums S instead of S − a for samples within Δ."""
    alive = [s for s in samples if s > a]
    if not alive:
        return Fraction(0)

    def ratio(d: int) -> Fraction:
        done = [s for s in alive if s - a <= d]
        if not done:
            return Fraction(0)
        within = sum(s if variant == "authors" else s - a for s in done)
        expect = Fraction(within + d * (len(alive) - len(done)), len(alive))
        return Fraction(len(done), len(alive)) / expect

    deltas = [delta] if delta is not None else range(1, max(alive) - a + 1)
    return max(ratio(d) for d in deltas)


samples_st = st.lists(st.integers(1, 40), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(
    samples_st,
    st.integers(0, 45),
    st.one_of(st.none(), st.integers(1, 50)),
    st.sampled_from(["as-written", "authors"]),
)
def test_index_matches_brute_force(
    samples: list[int], a: int, delta: int | None, variant: str
) -> None:
    got = ServiceDistribution(samples).gittins_index(a, delta, variant)
    assert got == pytest.approx(float(brute(samples, a, delta, variant)), rel=1e-12, abs=0)


def test_figure7_distribution_values() -> None:
    """{4, 8, 12}: G(0) = 1/8 for both; at a = 4 the variants disagree (1/6 vs 1/10), which is
    why Figure 7 gives 28/3 as written and the paper's 10 with the authors' variant."""
    d = ServiceDistribution([4, 8, 12])
    assert d.gittins_index(0, 100) == 1 / 8
    assert d.gittins_index(0, 100, "authors") == 1 / 8
    assert d.gittins_index(4, 100) == 1 / 6
    assert d.gittins_index(4, 100, "authors") == 1 / 10
    assert d.gittins_index(12, 100) == 0.0  # outlived every sample: lowest priority


def test_parse_learn_and_state() -> None:
    d = ServiceDistribution.parse(
        ["duration\n", "30\n", "10\n", "\n", "20\n"], rebuild_fraction=0.5
    )
    assert d.samples == [10, 20, 30]
    d.add(5)  # 1 pending < 0.5 × 3: not merged yet, index unchanged
    assert len(d) == 4 and d.gittins_index(0, 10) == 1 / 30
    d.add(40)  # 2 pending ≥ 1.5: merged
    assert d.samples == [5, 10, 20, 30, 40]
    assert d.gittins_index(0, 10) == pytest.approx(float(brute([5, 10, 20, 30, 40], 0, 10, "x")))
    d.add(7)
    restored = ServiceDistribution.from_state(d.export_state())
    assert restored.samples == d.samples and len(restored) == 6
    with pytest.raises(CoreError, match="duration"):
        ServiceDistribution.parse(["gpu_time", "3"])
    with pytest.raises(CoreError, match="variant"):
        d.gittins_index(0, 1, "nope")
    with pytest.raises(CoreError):
        d.add(float("nan"))


SEED = resolve_trace("yarn-gput1000")


def test_seed_file_loads() -> None:
    lines = SEED.read_text().splitlines()
    d = ServiceDistribution.parse(lines)
    assert len(d) == len(lines) - 1 > 0
    assert d.gittins_index(0, 3600) > d.gittins_index(10**9, 3600) == 0.0


def test_thresholds_split_where_the_index_falls() -> None:
    # a job past 100 GPU-s is likely a 10,000 one, and past 10,000 likely a 1,000,000 one
    trimodal = ServiceDistribution([100.0] * 100 + [10000.0] * 50 + [1e6] * 10)
    assert trimodal.thresholds(floor=0.0, spacing=1.0, max_queues=6) == (100.0, 10000.0)
    assert trimodal.thresholds(floor=1000.0, spacing=1.0, max_queues=6) == (10000.0,)
    assert trimodal.thresholds(floor=0.0, spacing=1000.0, max_queues=6) == (100.0,)
    assert trimodal.thresholds(floor=0.0, spacing=1.0, max_queues=2) == (100.0,)
    # past 500 a job is likely to end at 3,000 soon: it stays ahead of fresh jobs
    bimodal = ServiceDistribution([500.0] * 20 + [3000.0] * 90 + [100000.0] * 10)
    assert bimodal.thresholds(floor=0.0, spacing=1.0, max_queues=6) == (3000.0,)
    # light-tailed: the longer a job has run, the sooner it ends, so one FIFO queue is right
    uniform = ServiceDistribution([1000.0 + i for i in range(1000)])
    assert uniform.thresholds(floor=0.0, spacing=1.0, max_queues=6) == ()


def test_a_sample_a_hair_above_the_attained_service_has_a_finite_index() -> None:
    """Found by hypothesis: prefix sums rounded the service left past ``a`` to 0 and the
    index divided by it. Every sample above ``a`` leaves a positive remainder."""
    samples = [3.3 * k for k in range(1, 31) if 3.3 * k < 100] + [100.00000000000003]
    index = ServiceDistribution(samples).index(100.0, 1e300, False)
    assert 0 < index < math.inf
