"""The ring allreduce sums correctly for any N, K and float dtype, and its traffic matches the formulas."""

from __future__ import annotations

import numpy as np
import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from utils import ring

TOL = {np.float16: 2e-2, np.float32: 1e-5, np.float64: 1e-12}


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 8),
    k=st.integers(0, 64),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    seed=st.integers(0, 2**32 - 1),
    average=st.booleans(),
)
def test_ring_equals_numpy_sum_and_counts_match_the_closed_form(n, k, dtype, seed, average):
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, size=k).astype(dtype) for _ in range(n)]
    result = ring.ring_allreduce(arrays, average=average)
    expected = np.sum(np.stack(arrays).astype(np.float64), axis=0) / (n if average else 1)
    for out in result.outputs:
        assert out.dtype == dtype and out.shape == (k,)
        np.testing.assert_allclose(out.astype(np.float64), expected, rtol=0, atol=TOL[dtype] * max(n, 1))
    # every worker ends with the very same bits
    assert all(np.array_equal(result.outputs[0], o) for o in result.outputs)
    exact = ring.ring_traffic_values(n, k)
    assert [result.total_sent_values(i) for i in range(n)] == exact
    received = [sum(result.received_values[p][i] for p in ring.PHASES) for i in range(n)]
    assert received == [exact[(i - 1) % n] for i in range(n)]
    assert result.total_sent_bytes(0) == exact[0] * np.dtype(dtype).itemsize
    assert result.steps_per_phase == n - 1
    if k % n == 0:
        assert all(v == ring.ring_traffic_ideal(n, k) for v in exact)
    assert max(exact) == ring.busiest_ring_traffic(n, k)
    assert result.sent_values == ring.ring_traffic_per_phase(n, k)  # phase by phase, not only in total


def test_phases_by_hand():
    # N = 4, K = 8: every chunk has 2 values; each phase sends 3 chunks of 2 from every worker.
    assert ring.ring_traffic_per_phase(4, 8) == {"scatter-reduce": [6] * 4, "allgather": [6] * 4}
    # K = 5, N = 3, chunks 2, 2, 1: worker 0 skips chunk 1 (2 values), then chunk 2 (1 value).
    assert ring.ring_traffic_per_phase(3, 5) == {"scatter-reduce": [3, 4, 3], "allgather": [4, 3, 3]}
    assert ring.busiest_ring_traffic(3, 5) == 7 and ring.busiest_ring_traffic(4, 7) == 14 - 2 - 1


def test_uneven_closed_form_by_hand():
    # K = 5, N = 3: chunks 2, 2, 1. Worker i skips chunks (i+1)%3 and (i+2)%3: 10-2-1, 10-1-2, 10-2-2.
    assert ring.chunk_sizes(5, 3) == [2, 2, 1]
    assert ring.ring_traffic_values(3, 5) == [7, 7, 6]
    # K < N: chunks 1, 1, 0, 0
    assert ring.ring_traffic_values(4, 2) == [3, 4, 3, 2]
    assert ring.ring_traffic_values(1, 10) == [0]


def test_trace_of_a_tiny_ring_by_hand():
    arrays = [np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0]), np.array([100.0, 200.0, 300.0])]
    result = ring.ring_allreduce(arrays, trace=True)
    first = result.trace[0]
    assert (first.phase, first.step, first.sender, first.receiver, first.chunk) == ("scatter-reduce", 0, 0, 1, 0)
    assert first.values.tolist() == [1.0]
    # step 1: worker 1 forwards chunk 0, now 1 + 10
    step1 = [s for s in result.trace if s.phase == "scatter-reduce" and s.step == 1 and s.sender == 1][0]
    assert step1.chunk == 0 and step1.values.tolist() == [11.0]
    assert len(result.trace) == 2 * 2 * 3
    assert all(o.tolist() == [111.0, 222.0, 333.0] for o in result.outputs)
    assert "worker 0 -> worker 1" in ring.format_trace(result)


def test_shapes_other_than_1d_are_summed_elementwise():
    arrays = [np.ones((2, 3)), 2 * np.ones((2, 3))]
    assert ring.ring_allreduce(arrays).outputs[1].tolist() == [[3.0] * 3] * 2


@pytest.mark.parametrize(
    "arrays, error, message",
    [
        ([], ValueError, "empty list"),
        ([np.zeros(3), np.zeros(4)], ValueError, "same shape"),
        ([np.zeros(3, np.float32), np.zeros(3, np.float64)], TypeError, "same dtype"),
        ([np.zeros(3, np.int64), np.zeros(3, np.int64)], TypeError, "astype"),
    ],
)
def test_bad_inputs_get_clear_errors(arrays, error, message):
    with pytest.raises(error, match=message):
        ring.ring_allreduce(arrays)


def test_reference_traffic_formulas():
    assert ring.parameter_server_traffic(4, 100) == {"worker": 100, "server": 400}
    assert ring.all_to_all_traffic(4, 100) == 300
    assert ring.ring_traffic_ideal(4, 100) == 150


def _children():
    """Live child processes, but multiprocessing's long-lived resource tracker (one per parent)."""
    return {
        p.pid
        for p in psutil.Process().children(recursive=True)
        if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline())
    }


@pytest.mark.parametrize("n, k", [(1, 10), (2, 1000), (3, 1001), (4, 64), (7, 1003)])
def test_processes_match_numpy_and_count_bytes_on_the_wire(n, k):
    before = _children()
    rng = np.random.default_rng(n)
    arrays = [rng.normal(size=k).astype(np.float32) for _ in range(n)]
    result = ring.ring_allreduce_processes(arrays, timeout=60)
    expected = np.sum(np.stack(arrays), axis=0)
    for out in result.outputs:
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert result.payload_sent == [v * 4 for v in ring.ring_traffic_values(n, k)]
    # Worker i receives, byte for byte, what its left neighbour i-1 sent (not what it sent itself).
    assert result.payload_received == [result.payload_sent[(i - 1) % n] for i in range(n)]
    assert result.header_bytes == [2 * (n - 1) * ring.HEADER.size] * n
    assert _children() <= before


def test_uneven_chunks_by_hand_seven_workers():
    # K = 1003, N = 7: chunks 144, 144, 143, 143, 143, 143, 143 (1003 = 7 x 143 + 2).
    assert ring.chunk_sizes(1003, 7) == [144, 144] + [143] * 5
    # Worker 0 skips chunks 1 (144) and 2 (143): 2006 - 287 = 1719; worker 6 skips 0 and 1: 2006 - 288.
    sent = ring.ring_traffic_values(7, 1003)
    assert sent == [1719, 1720, 1720, 1720, 1720, 1719, 1718]
    result = ring.ring_allreduce([np.ones(1003) for _ in range(7)])
    received = [sum(result.received_values[p][i] for p in ring.PHASES) for i in range(7)]
    assert received == [1718, 1719, 1720, 1720, 1720, 1720, 1719]  # worker 0 receives what worker 6 sends
    assert received[0] != sent[0]


def test_processes_are_stopped_on_timeout():
    before = _children()
    with pytest.raises(TimeoutError, match="stopped"):
        ring.ring_allreduce_processes([np.zeros(10**6, np.float32)] * 3, timeout=0.05)
    assert _children() <= before
