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


def test_aes_gcm_rates_are_real_and_positive():
    enc, dec = commcost.aes_gcm_rates(1 << 16, repeats=2)
    assert enc > 1e6 and dec > 1e6  # any CPU of this decade seals more than a megabyte a second
    with pytest.raises(ValueError):
        commcost.aes_gcm_rates(8)


def test_encrypted_slowdown_in_turn_and_pipelined():
    # a link of 100 B/s, sealing at 400 B/s and opening at 400 B/s on the same core: in turn 1 + 0.25 + 0.25 = 1.5x;
    # overlapped the core needs 0.5 of the link's time per byte: the link stays the slowest, 1x
    assert commcost.encrypted_slowdown(100, 400, 400) == pytest.approx((1.5, 1.0))
    # a link faster than the core: overlapped, the core's seal + open sets the pace (1/500 + 1/1000 vs 1/1000)
    assert commcost.encrypted_slowdown(1000, 500, 1000) == pytest.approx((1 + 2 + 1, 3.0))
    with pytest.raises(ValueError):
        commcost.encrypted_slowdown(0, 1, 1)
