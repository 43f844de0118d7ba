"""The fits of lesson 01 recover known parameters; T(N), the deadline and the tiers behave as derived."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from utils import allreduce_model, commcost, data, fits, model, scenario


@settings(max_examples=50, deadline=None)
@given(coefficient=st.floats(0.01, 100), exponent=st.floats(-2, 2))
def test_power_law_fit_recovers_exact_laws(coefficient, exponent):
    x = np.array([10.0, 100.0, 1_000.0, 10_000.0])
    fit = fits.fit_power_law(x, coefficient * x**exponent)
    assert fit.exponent == pytest.approx(exponent, abs=1e-9)
    assert fit.coefficient == pytest.approx(coefficient, rel=1e-9)
    assert fit.predict(50.0) == pytest.approx(coefficient * 50.0**exponent, rel=1e-9)


def test_power_law_meaning():
    fit = fits.PowerLaw(coefficient=1.0, exponent=-0.5, r2=1.0)
    assert fit.factor_per_doubling() == pytest.approx(2**-0.5)
    assert fit.x_factor_for(0.5) == pytest.approx(4.0)  # error ~ size^-0.5: 4x the data halves it


def test_power_law_rejects_bad_input():
    with pytest.raises(ValueError, match="positive"):
        fits.fit_power_law([1, 2, 3], [1, 0, 2])
    with pytest.raises(ValueError, match="at least two"):
        fits.fit_power_law([1], [1])
    with pytest.raises(ValueError, match="different sizes"):
        fits.fit_power_law([5, 5], [1, 2])
    with pytest.raises(ValueError, match="one y per x"):
        fits.fit_power_law([1, 2, 3], [1, 2])


def test_doubling_time_of_tenfold_a_year():
    years = np.arange(2012, 2018, dtype=float)
    fit = fits.fit_doubling_time(years, 0.005 * 10.0 ** (years - 2012))
    assert fit.doubling_months == pytest.approx(12 * math.log(2) / math.log(10))
    assert fit.factor_per_year == pytest.approx(10.0)
    assert fit.predict(2014.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="does not grow"):
        fits.fit_doubling_time(years, 10.0 ** -(years - 2012))


def test_decimal_year():
    assert fits.decimal_year("2012-01") == pytest.approx(2012 + 0.5 / 12)
    assert fits.decimal_year("2016-12") == pytest.approx(2016 + 11.5 / 12)
    with pytest.raises(ValueError, match="YYYY-MM"):
        fits.decimal_year("May 2018")


def test_time_vs_size_fit_and_elasticity():
    sizes = np.array([1e3, 2e3, 4e3, 8e3])
    fit = fits.fit_time_vs_size(sizes, 2.0 + 0.001 * sizes)
    assert fit.overhead == pytest.approx(2.0)
    assert fit.per_sample == pytest.approx(0.001)
    assert fit.elasticity(2e3) == pytest.approx(0.5)  # half of the time is overhead there
    assert fit.elasticity(1e9) == pytest.approx(1.0, abs=1e-5)  # at a large size time is proportional
    # A negative intercept (here -0.5 s) is noise: the fit goes through the origin instead. The least-squares
    # slope through the origin of t = -0.5 + 0.001 x is sum(x t) / sum(x x), computed by hand for these sizes:
    times = -0.5 + 0.001 * sizes  # 0.5, 1.5, 3.5, 7.5 s
    assert np.polyfit(sizes, times, 1)[1] == pytest.approx(-0.5)  # the first fit's intercept is negative
    through_origin = fits.fit_time_vs_size(sizes, times)
    assert through_origin.overhead == 0.0
    sxt = 1e3 * 0.5 + 2e3 * 1.5 + 4e3 * 3.5 + 8e3 * 7.5  # 77,500
    sxx = 1e6 + 4e6 + 16e6 + 64e6  # 85e6
    assert through_origin.per_sample == pytest.approx(sxt / sxx)
    assert through_origin.predict(2e3) == pytest.approx(2e3 * 77_500 / 85e6)
    with pytest.raises(ValueError, match="do not grow"):
        fits.fit_time_vs_size(sizes, 10.0 - 0.001 * sizes)


def test_growth_and_speedup():
    assert scenario.growth_factor(0.05, 12) == pytest.approx(1.05**12)
    assert scenario.speedup_needed(23.0) == pytest.approx(23.0)
    assert scenario.speedup_needed(23.0, 1.0, data_growth=2.0) == pytest.approx(46.0)
    assert scenario.speedup_needed(23.0, 0.5, data_growth=4.0, time_exponent=0.5) == pytest.approx(92.0)
    with pytest.raises(ValueError, match="fraction"):
        scenario.growth_factor(-2, 3)
    with pytest.raises(ValueError, match="deadline_hours"):
        scenario.speedup_needed(23.0, 0.0)


def test_job_time_on_one_worker_is_the_compute():
    t = scenario.job_seconds_on_workers(1, 82_800.0, 1e5, 1e8, commcost.gbit_to_bytes_per_s(25), 20e-6)
    assert float(t) == pytest.approx(82_800.0)


def test_job_time_matches_the_ring_formula():
    bw = commcost.gbit_to_bytes_per_s(100)
    t = scenario.job_seconds_on_workers(8, 36_000.0, 10_000, 1e8, bw)
    assert float(t) == pytest.approx(36_000 / 8 + 10_000 * 2 * 7 / 8 * 1e8 / bw)
    weak = scenario.job_seconds_on_workers(8, 36_000.0, 10_000, 1e8, bw, scale_batch=True)
    assert float(weak) == pytest.approx(36_000 / 8 + 10_000 / 8 * 2 * 7 / 8 * 1e8 / bw)
    with pytest.raises(ValueError, match="at least 1"):
        scenario.job_seconds_on_workers(0, 1.0, 1, 1, bw)
    with pytest.raises(ValueError, match="gbit_to_bytes_per_s"):
        scenario.job_seconds_on_workers(2, 1.0, 1, 1, 0.0)


@settings(max_examples=40, deadline=None)
@given(gbps=st.sampled_from([25, 100, 400]), steps=st.integers(1_000, 500_000), hours=st.floats(1.5, 50))
def test_workers_needed_is_the_first_that_meets_the_deadline(gbps, steps, hours):
    bw = commcost.gbit_to_bytes_per_s(gbps)
    args = (hours * 3600, steps, 1e8, bw, 20e-6)
    n = scenario.workers_needed(3600.0, *args, max_workers=512)
    limit = scenario.communication_limit_seconds(steps, 1e8, bw)
    if n is None:
        times = scenario.job_seconds_on_workers(np.arange(1, 513), *args)
        assert np.all(times > 3600.0)
    else:
        assert scenario.job_seconds_on_workers(n, *args) <= 3600.0
        assert n == 1 or scenario.job_seconds_on_workers(n - 1, *args) > 3600.0
        # the allreduces of n workers take steps x 2(n-1)/n x K/B: at most the N -> infinity limit, at least half
        assert n == 1 or limit / 2 <= float(scenario.job_seconds_on_workers(n, 0.0, steps, 1e8, bw)) <= limit


def test_scaled_batch_always_reaches_the_deadline_eventually():
    bw = commcost.gbit_to_bytes_per_s(25)
    fixed = scenario.workers_needed(3600.0, 23 * 3600, 165_600, 1e8, bw)
    scaled = scenario.workers_needed(3600.0, 23 * 3600, 165_600, 1e8, bw, scale_batch=True)
    assert fixed is None  # 165,600 steps x 2 x 100 MB / 3.125 GB/s = 2.9 h of allreduce: above the deadline
    assert scaled is not None and scaled > 23


def test_productivity_tiers():
    assert scenario.productivity_tier(300)[0] == "minutes"
    assert scenario.productivity_tier(23 * 3600)[0] == "hours"
    assert scenario.productivity_tier(3 * 24 * 3600)[0] == "days"
    assert scenario.productivity_tier(10 * 24 * 3600)[0] == "weeks"
    assert scenario.productivity_tier(60 * 24 * 3600)[0] == "months"
    with pytest.raises(ValueError):
        scenario.productivity_tier(-1)


def test_data_files_cite_every_row():
    import pandas as pd

    from utils.paths import REPO_ROOT

    trends = pd.read_csv(REPO_ROOT / "data/compute_trends.csv")
    assert list(trends.columns) == ["system", "date", "pfs_days", "estimate", "paper", "source"]
    assert trends.source.str.startswith("Amodei and Hernandez, AI and Compute").all()
    assert (trends.pfs_days > 0).all() and trends.date.map(fits.decimal_year).is_monotonic_increasing
    exps = pd.read_csv(REPO_ROOT / "data/scaling_law_exponents.csv")
    assert exps.source.str.len().gt(20).all() and (exps.exponent < 0).all()


def test_learning_curve_point_trains_and_times():
    from utils import data

    values = data.synthetic_series(600, seed=3)
    x, y = data.make_windows(values / 50.0, 48, 24)
    point = model.learning_curve_point(x[:300], y[:300], x[300:], y[300:], max_epochs=3, patience=1)
    assert point.windows == 300 and 1 <= point.epochs <= 3
    assert len(point.epoch_seconds) == point.epochs and 0 < sum(point.epoch_seconds) <= point.wall_seconds
    assert point.seconds_per_epoch > 0
    assert np.isfinite(point.best_val_loss)
    with pytest.raises(ValueError, match="as many targets"):
        model.learning_curve_point(x[:10], y[:9], x, y, max_epochs=1)


def test_ar1_forecast_floor():
    assert data.ar1_forecast_floor(0.9, 2.0, 1) == pytest.approx(4.0)  # one step ahead: the shock's variance
    long_run = 4.0 / (1 - 0.81)
    assert data.ar1_forecast_floor(0.9, 2.0, 10_000) == pytest.approx(long_run, rel=1e-3)  # far ahead: the variance
    rng = np.random.default_rng(0)
    level, errs = 0.0, []
    for _ in range(20_000):  # simulate: forecasting 3 steps ahead with phi^3 * level is optimal
        path = [level]
        for _ in range(3):
            path.append(0.9 * path[-1] + rng.normal(0, 2.0))
        errs.append([(path[h] - 0.9**h * level) ** 2 for h in (1, 2, 3)])
        level = path[1]
    assert np.mean(errs) == pytest.approx(data.ar1_forecast_floor(0.9, 2.0, 3), rel=0.05)
    with pytest.raises(ValueError, match="stationary"):
        data.ar1_forecast_floor(1.0, 1.0, 3)


def test_seconds_per_epoch_is_the_median_after_the_first_epoch():
    point = model.CurvePoint(
        windows=10, best_val_loss=1.0, epochs=4, epoch_seconds=[9.0, 2.0, 4.0, 3.0], wall_seconds=20
    )
    assert point.seconds_per_epoch == 3.0  # the first epoch (tracing) left out: median of 2, 4, 3
    one = model.CurvePoint(windows=10, best_val_loss=1.0, epochs=1, epoch_seconds=[5.0], wall_seconds=6)
    assert one.seconds_per_epoch == 5.0  # a single epoch is all there is


def test_communication_limit_is_approached_not_a_floor():
    bw = commcost.gbit_to_bytes_per_s(25)  # 3.125e9 B/s
    limit = scenario.communication_limit_seconds(1000, 1e8, bw)
    assert limit == pytest.approx(1000 * 2 * 1e8 / 3.125e9)  # 64 s
    comm = [float(scenario.job_seconds_on_workers(n, 0.0, 1000, 1e8, bw)) for n in (2, 4, 1024)]
    assert comm[0] == pytest.approx(limit / 2)  # N = 2: K through each link once per step
    assert comm[1] == pytest.approx(limit * 3 / 4)
    assert comm[0] < comm[1] < comm[2] < limit  # it grows with N towards the limit


def test_best_workers_balances_compute_and_ring_latency():
    # T(N) = C/N + S 2(N-1) l with no bandwidth term (K = 0): the minimum is at N = sqrt(C / (2 S l)).
    n, t = scenario.best_workers(20_000.0, 1000, 0.0, 1e9, step_latency=1e-4)  # sqrt(20,000 / 0.2) = 316.2
    assert n in (316, 317)
    assert t == pytest.approx(20_000 / n + 1000 * 2 * (n - 1) * 1e-4)
    n_scaled, _ = scenario.best_workers(20_000.0, 1000, 0.0, 1e9, 1e-4, scale_batch=True, max_workers=64)
    assert n_scaled == 64  # with S/N steps the latency cost stays bounded: more workers always help


def test_parameter_server_time_counts_one_direction_or_both():
    bw = 1e9
    overlapped = allreduce_model.parameter_server_seconds(4, 1e8, bw, latency=0.0)
    assert float(overlapped) == pytest.approx(0.4)  # 4 workers x 100 MB into (and out of) one link at 1 GB/s
    assert float(allreduce_model.parameter_server_seconds(4, 1e8, bw, 0.0, overlap=False)) == pytest.approx(0.8)
    assert float(allreduce_model.parameter_server_seconds(4, 1e8, bw, 0.0, servers=2)) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="servers"):
        allreduce_model.parameter_server_seconds(4, 1e8, bw, 0.0, servers=0)


SINGLE = """\"\"\"One worker.\"\"\"

import numpy as np

args = parser.parse_args()
net = build()
net.fit(x)
"""
DISTRIBUTED = """\"\"\"Several workers.

Docstring lines do not count.
\"\"\"

import numpy as np
import horovod.tensorflow as hvd
import signal

# Horovod: start.
hvd.init()
args = job.parse(parser)  # SageMaker: hyperparameters
parser.add_argument("--die-at-epoch", type=int)
keras.config.set_dtype_policy(args.precision)
net = wrap(
    build()
)
net.fit(x)
"""


def test_code_change_sorts_the_added_lines():
    change = scenario.code_change(SINGLE, DISTRIBUTED)
    assert change["demonstration"] == ["import signal", 'parser.add_argument("--die-at-epoch", type=int)']
    assert change["SageMaker"] == ["args = job.parse(parser)  # SageMaker: hyperparameters"]
    assert change["precision"] == ["keras.config.set_dtype_policy(args.precision)"]  # not counted as distribution
    # named lines, then the lines of a change that name nothing (they belong to the change around them)
    assert change["Horovod"] == [
        "import horovod.tensorflow as hvd",
        "# Horovod: start.",
        "hvd.init()",
        "net = wrap(",
        "    build()",
        ")",
    ]
    assert change["removed"] == ["args = parser.parse_args()", "net = build()"]


def test_source_lines_skip_blank_and_comment_lines():
    assert scenario.source_lines('"""Doc."""\n\n# a comment\nx = 1  # kept\n    # indented comment\ny = 2\n') == 3


def test_predicted_efficiency_and_the_binding_rate_by_hand():
    # one rank: 1.0 s a step; two ranks compute 1.1 s each (they share the machine), 0.05 s fixed cost,
    # 10 MB of gradients: the ring sends 10 MB through each link; at 10 MB/s that is 1 s more.
    eff = allreduce_model.predicted_efficiency(1.0, 2, 1.1, 10e6, [10e6, 100e6], fixed_seconds=0.05)
    assert eff == pytest.approx([1 / 2.15, 1 / 1.25])
    # the link at which the 10 MB take as long as the 1.1 s computation
    assert allreduce_model.binding_rate(2, 10e6, 1.1) == pytest.approx(10e6 / 1.1)
    assert allreduce_model.binding_rate(4, 10e6, 1.0) == pytest.approx(15e6)
    # with the allreduce free to run during the last 2/3 of the computation: 1.1/3 + max(2.2/3, 1.05) at 10 MB/s,
    # and the whole step is the computation once the allreduce (0.15 s) fits in the backward pass
    eff = allreduce_model.predicted_efficiency(1.0, 2, 1.1, 10e6, [10e6, 100e6], fixed_seconds=0.05, overlap=2 / 3)
    assert eff == pytest.approx([1 / (1.1 / 3 + 1.05), 1 / 1.1])
    assert allreduce_model.binding_rate(2, 10e6, 1.2, overlap=0.5) == pytest.approx(10e6 / 0.6)
    assert allreduce_model.binding_rate(2, 10e6, 1.2, overlap=0.5, fixed_seconds=0.1) == pytest.approx(10e6 / 0.5)
    assert allreduce_model.binding_rate(2, 10e6, 1.2, overlap=0.5, fixed_seconds=0.7) == float("inf")
    with pytest.raises(ValueError):
        allreduce_model.predicted_efficiency(1.0, 1, 1.0, 1e6, 1e6)
    with pytest.raises(ValueError):
        allreduce_model.predicted_efficiency(1.0, 2, 1.0, 1e6, 1e6, overlap=1.5)


def test_predicted_efficiency_layer_by_layer_by_hand():
    # 1.2 s of computation, the last 1/2 of it backward (0.6 s); two layers made in that order, 6 MB then 2 MB
    # (so ready at 0.6 + 0.45 = 1.05 s and at 1.2 s). At 2 ranks through 10 MB/s links, 6 MB take 0.6 s and 2 MB
    # 0.2 s: the first crosses 1.05 -> 1.65 s, the second waits for the link, 1.65 -> 1.85 s; +0.05 s fixed.
    eff = allreduce_model.predicted_efficiency(1.0, 2, 1.2, 8e6, 10e6, 0.05, overlap=0.5, layer_bytes=[6e6, 2e6])
    assert eff == pytest.approx(1 / 1.9)
    # the same bytes in the other order: 2 MB ready at 0.75 s crosses by 0.95 s; 6 MB ready at 1.2 s ends at 1.8 s
    eff = allreduce_model.predicted_efficiency(1.0, 2, 1.2, 8e6, 10e6, 0.05, overlap=0.5, layer_bytes=[2e6, 6e6])
    assert eff == pytest.approx(1 / 1.85)
    # a fast link: the computation alone; and never better than the whole allreduce started at the pass's start,
    # never worse than no overlap at all
    assert allreduce_model.predicted_efficiency(
        1.0, 2, 1.2, 8e6, 1e12, overlap=0.5, layer_bytes=[6e6, 2e6]
    ) == pytest.approx(1 / 1.2, rel=1e-3)
    rates = np.geomspace(1e6, 1e10, 30)
    layered = allreduce_model.predicted_efficiency(
        1.0, 2, 1.2, 8e6, rates, 0.05, overlap=0.5, layer_bytes=[1e6, 6e6, 1e6]
    )
    assert np.all(layered <= allreduce_model.predicted_efficiency(1.0, 2, 1.2, 8e6, rates, 0.05, overlap=0.5) + 1e-12)
    assert np.all(layered >= allreduce_model.predicted_efficiency(1.0, 2, 1.2, 8e6, rates, 0.05, overlap=0.0) - 1e-12)
    with pytest.raises(ValueError, match="adding up to grad_bytes"):
        allreduce_model.predicted_efficiency(1.0, 2, 1.2, 8e6, 10e6, overlap=0.5, layer_bytes=[6e6])


def test_a_measured_overhead_is_added_to_every_step():
    # the by-hand case above (1.9 s) plus 0.1 s that two ranks cost a step on loopback; on a fast link the last
    # gradient is ready at 1.2 s and its fixed cost ends the step at 1.25 s, plus 0.1
    eff = allreduce_model.predicted_efficiency(
        1.0, 2, 1.2, 8e6, [10e6, 1e12], overlap=0.5, layer_bytes=[6e6, 2e6], fixed_seconds=0.05, overhead_seconds=0.1
    )
    assert eff == pytest.approx([1 / 2.0, 1 / 1.35], rel=1e-3)
    with pytest.raises(ValueError, match="overhead_seconds"):
        allreduce_model.predicted_efficiency(1.0, 2, 1.2, 8e6, 1e7, overhead_seconds=-0.1)
