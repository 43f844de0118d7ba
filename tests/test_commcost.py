"""The alpha-beta fit recovers known parameters; the cluster formulas behave as derived."""

import numpy as np
import pytest

from utils import commcost


def test_fit_recovers_alpha_and_beta():
    sizes = np.array([4e3, 4e4, 4e5, 4e6, 4e7])
    true = commcost.AlphaBeta(alpha=2e-4, beta=1e9)
    noisy = true.predict(sizes) * np.array([1.02, 0.98, 1.01, 0.99, 1.0])
    fit = commcost.fit_alpha_beta(sizes, noisy)
    assert fit.alpha == pytest.approx(2e-4, rel=0.05)
    assert fit.beta == pytest.approx(1e9, rel=0.05)
    assert np.max(np.abs(commcost.relative_errors(fit, sizes, noisy))) < 0.05


def test_fit_rejects_bad_input():
    with pytest.raises(ValueError):
        commcost.fit_alpha_beta([1], [1])
    with pytest.raises(ValueError, match="positive"):
        commcost.fit_alpha_beta([1, 2], [0, 1])


def test_ring_time_hardly_grows_with_n_but_parameter_server_does():
    bw = commcost.gbit_to_bytes_per_s(100)
    assert bw == 12.5e9
    ring = commcost.ring_allreduce_seconds(np.array([2, 256]), 1e8, bw, 0.0)
    assert ring[1] / ring[0] == pytest.approx((2 * 255 / 256) / (2 * 1 / 2))  # bounded by 2x
    ps = commcost.parameter_server_seconds(np.array([2, 256]), 1e8, bw, 0.0)
    assert ps[1] / ps[0] == pytest.approx(128)
    assert commcost.ring_allreduce_seconds(1, 1e8, bw, 1.0) == 0
