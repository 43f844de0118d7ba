"""The encryption cost model of lesson 03 behaves as derived."""

import pytest

from utils import commcost


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
