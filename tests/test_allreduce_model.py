"""The ring's alpha-beta-gamma model recovers known parameters from synthetic times, and finds a cache bend."""

from __future__ import annotations

import numpy as np
import pytest

from utils import allreduce_model as am

SIZES = np.array([4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20], dtype=float)
# Known parameters: 0.5 ms per call, 30 µs per ring step, 2 GB/s links, 25 ps to add one byte.
OVERHEAD, ALPHA, B, GAMMA = 5e-4, 3e-5, 2e9, 25e-12


def test_ring_seconds_by_hand():
    # N = 4, 8 MB: 0.5 ms + 6 x 30 µs + 3/4 x 8e6 x (2 / 2e9 + 25e-12) = 0.5 + 0.18 + 6.15 ms
    t = am.ring_seconds(4, 8e6, ALPHA, B, GAMMA, OVERHEAD)
    assert t == pytest.approx(0.5e-3 + 0.18e-3 + 0.75 * 8e6 * (1e-9 + 25e-12))
    assert am.ring_seconds(1, 8e6, ALPHA, B, GAMMA, OVERHEAD) == pytest.approx(OVERHEAD)  # one worker: no traffic
    with pytest.raises(ValueError):
        am.ring_seconds(0, 1.0, ALPHA, B)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_one_line_per_n_recovers_intercept_and_slope(n):
    t = am.ring_seconds(n, SIZES, ALPHA, B, GAMMA, OVERHEAD)
    fit = am.fit_line(SIZES, t)
    assert fit.bend is None
    assert fit.intercept == pytest.approx(OVERHEAD + 2 * (n - 1) * ALPHA, rel=1e-6)
    assert fit.slope == pytest.approx((n - 1) / n * (2 / B + GAMMA), rel=1e-6)
    # with gamma measured apart, the slope gives back the link bandwidth
    assert am.implied_bandwidth(fit.slope, n, GAMMA) == pytest.approx(B, rel=1e-6)
    assert np.max(np.abs(fit.relative_errors(SIZES, t))) < 1e-9


def test_the_fit_minimises_the_largest_relative_error():
    # Times 10 % above the line at one size: least squares would spread the miss unevenly; the fit
    # balances it, so that no size misses by more than the best any line can do (here 5 % each way).
    t = 1e-3 + SIZES / 1e9
    t[3] *= 1.10
    fit = am.fit_line(SIZES, t)
    assert np.max(np.abs(fit.relative_errors(SIZES, t))) < 0.06


def test_joint_fit_over_n_recovers_overhead_alpha_and_bandwidth():
    ns = np.repeat([2, 3, 4, 8], len(SIZES))
    b = np.tile(SIZES, 4)
    rng = np.random.default_rng(0)
    t = am.ring_seconds(ns, b, ALPHA, B, GAMMA, OVERHEAD) * (1 + rng.uniform(-0.01, 0.01, size=b.size))
    fit = am.fit_ring(ns, b, t, gamma=GAMMA)
    assert fit.overhead == pytest.approx(OVERHEAD, rel=0.1)
    assert fit.alpha == pytest.approx(ALPHA, rel=0.1)
    assert fit.bandwidth == pytest.approx(B, rel=0.02)
    assert np.max(np.abs(fit.predict(ns, b) / t - 1)) < 0.03


def test_a_cache_bend_is_found_and_fitted_as_two_regimes():
    # 8 GB/s while pieces fit in cache (up to 1 MiB), 1 GB/s beyond: no single line comes within 25 %.
    bend = 1 << 20
    t = 1e-3 + SIZES / 8e9 + np.maximum(SIZES - bend, 0) * (1 / 1e9 - 1 / 8e9)
    one = am.fit_line(SIZES, t)
    assert np.max(np.abs(one.relative_errors(SIZES, t))) > 0.25
    two = am.fit_line(SIZES, t, goal=0.25)
    assert two.bend == bend
    assert 1 / two.slope == pytest.approx(8e9, rel=1e-4) and 1 / two.slope_above == pytest.approx(1e9, rel=1e-4)
    assert np.max(np.abs(two.relative_errors(SIZES, t))) < 1e-6
    # below the goal, one line is kept
    assert am.fit_line(SIZES, 1e-3 + SIZES / 1e9, goal=0.25).bend is None


def test_bad_inputs_get_clear_errors():
    with pytest.raises(ValueError, match="at least two"):
        am.fit_line([1.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        am.fit_line([1.0, 2.0], [0.0, 1.0])
    with pytest.raises(ValueError, match="do not grow"):
        am.fit_line([1e3, 1e6, 1e7], [3e-3, 2e-3, 1e-3])
    with pytest.raises(ValueError, match="reduction alone"):
        am.implied_bandwidth(1e-12, 2, 1e-9)
    with pytest.raises(ValueError, match="two values of n"):
        am.fit_ring([2, 2], [1.0, 2.0], [1.0, 2.0], gamma=0.0)


def test_measured_gamma_is_a_plausible_time_per_byte():
    gamma = am.measure_gamma(1 << 20, repeats=3)
    assert 1e-13 < gamma < 1e-8  # between 100 TB/s and 100 MB/s for adding floats on one core


def test_fit_links_recovers_each_set_rate_from_its_own_rows():
    rows = []
    rng = np.random.default_rng(1)
    for rate_bits, noise in ((200e6, 0.02), (1e9, 0.02)):
        for n in (2, 3, 4):
            for b in (1 << 18, 1 << 20, 4 << 20, 8 << 20):
                t = am.ring_seconds(n, b, 50e-6, rate_bits / 8, GAMMA, 2e-3) * (1 + rng.uniform(-noise, noise))
                rows.append({"np": n, "bytes": b, "best_seconds": t, "link": f"{rate_bits:g}", "link_bps": rate_bits})
    # a small message far off the model: below min_bytes, it must not count
    rows.append({"np": 2, "bytes": 1 << 10, "best_seconds": 1.0, "link": "2e+08", "link_bps": 200e6})
    fits = am.fit_links(rows, gamma=GAMMA)
    assert [f.link for f in fits] == ["2e+08", "1e+09"]
    for f in fits:
        assert f.bandwidth_ratio == pytest.approx(1.0, abs=0.03)
        assert f.worst_error < 0.03
    with pytest.raises(ValueError, match="link_bps"):
        am.fit_links([{"np": 2, "bytes": 1, "best_seconds": 1.0}], gamma=0.0)


def test_ring_hardly_grows_with_n_but_a_parameter_server_does():
    bw = 12.5e9  # 100 Gb/s
    ring = am.ring_seconds(np.array([2, 256]), 1e8, 0.0, bw)
    assert ring[1] / ring[0] == pytest.approx((2 * 255 / 256) / (2 * 1 / 2))  # bounded by 2x
    ps = am.parameter_server_seconds(np.array([2, 256]), 1e8, bw, 0.0)
    assert ps[1] / ps[0] == pytest.approx(128)
    assert am.ring_seconds(1, 1e8, 1.0, bw) == 0


def _p4d_like(servers: int) -> am.Topology:
    # 8 GPUs of 300 GB/s each way inside, 50 GB/s of network a server; 3 us and 10 us a step
    return am.Topology(8, servers, am.Link(300e9, 3e-6), am.Link(50e9, 10e-6))


def test_two_level_ring_by_hand():
    one = _p4d_like(1)  # N = 8 inside one server: NVLink only, 14 steps of 3 us
    assert one.n == 8 and one.ring_bandwidth == 300e9
    assert float(am.allreduce_seconds(one, 1e9)) == pytest.approx(14 * 3e-6 + 2 * 7 / 8 * 1e9 / 300e9)
    four = _p4d_like(4)  # N = 32: 62 steps, 6 of them cross the network; the network (50 GB/s) is the slowest hop
    expected = 2 * (32 - 4) * 3e-6 + 2 * 3 * 10e-6 + 2 * 31 / 32 * 1e9 / 50e9
    assert float(am.allreduce_seconds(four, 1e9, overhead=1e-3)) == pytest.approx(1e-3 + expected)
    # one GPU a server: the flat ring of lesson 03, every step over the network
    flat = am.Topology(1, 16, am.Link(1.0), am.Link(3.125e9, 20e-6))
    assert float(am.allreduce_seconds(flat, 100e6)) == pytest.approx(float(am.ring_seconds(16, 100e6, 20e-6, 3.125e9)))
    assert float(am.allreduce_seconds(am.Topology(1, 1, am.Link(1.0), am.Link(1.0)), 1e9)) == 0.0


def test_two_level_tree_by_hand():
    t = _p4d_like(32)  # 256 GPUs: a chain of 8 inside (7 steps), a tree of depth log2(32) = 5 across; a server
    # sends 2b over its network (slower than 2b over NVLink), at NCCL's 92 % for the tree
    expected = 2 * (7 * 3e-6 + 5 * 10e-6) + 2 * 1e6 / 50e9 / 0.92
    assert float(am.allreduce_seconds(t, 1e6, "tree")) == pytest.approx(expected)
    # two servers: each is the root of one tree and sends b, not 2b
    two = _p4d_like(2)
    assert float(am.allreduce_seconds(two, 1e6, "tree")) == pytest.approx(2 * (7 * 3e-6 + 10e-6) + 1e6 / 50e9 / 0.92)
    # small messages: the tree's few latencies win; large ones: the ring's (N-1)/N share of the buffer wins
    assert am.fastest_algorithm(t, 1 << 10)[0] == "tree"
    assert am.fastest_algorithm(_p4d_like(8), 1 << 30)[0] == "ring"
    assert am.fastest_algorithm(_p4d_like(2), 1 << 30)[0] == "tree"  # two servers: each sends b, not 2(N-1)/N b
    with pytest.raises(ValueError, match="unknown algorithm"):
        am.allreduce_seconds(t, 1e6, "butterfly")


def test_bus_bandwidth_gives_back_the_slowest_link():
    t = _p4d_like(4)
    big = 1 << 34  # latencies negligible: the bus bandwidth is the server's network, as nccl-tests reports it
    assert float(am.bus_bandwidth(big, am.allreduce_seconds(t, big), t.n)) == pytest.approx(50e9, rel=1e-3)
    with pytest.raises(ValueError, match="at least 2"):
        am.bus_bandwidth(1e6, 1.0, 1)


def test_topology_refuses_bad_input():
    with pytest.raises(ValueError, match="bandwidth must be a positive"):
        am.Link(0.0)
    with pytest.raises(ValueError, match="bandwidth must be a positive"):
        am.Link(float("nan"))
    with pytest.raises(ValueError, match="latency"):
        am.Link(1e9, -1e-6)
    with pytest.raises(ValueError, match="servers must be a whole number"):
        am.Topology(8, 0, am.Link(1e9), am.Link(1e9))


def test_step_efficiency_hides_the_allreduce_behind_the_backward_pass():
    # 0.3 s of computation, 0.2 s of it backward: an allreduce of 0.15 s hides; one of 0.5 s leaves 0.1 + 0.5
    assert am.step_efficiency(0.3, 0.15, overlap=2 / 3) == pytest.approx(1.0)
    assert am.step_efficiency(0.3, 0.5, overlap=2 / 3) == pytest.approx(0.3 / 0.6)
    assert am.step_efficiency(0.3, 0.5, overlap=0.0, overhead=0.1) == pytest.approx(0.3 / 0.9)
    with pytest.raises(ValueError, match="overlap"):
        am.step_efficiency(0.3, 0.1, overlap=2)


def test_instances_from_the_data_file():
    p4d = am.topology_of("ml.p4d.24xlarge", 4)
    assert (p4d.gpus, p4d.servers, p4d.n) == (8, 4, 32)
    assert p4d.network.bytes_per_s == pytest.approx(400e9 / 8) and p4d.inside.bytes_per_s == pytest.approx(300e9)
    flat = am.topology_of("ml.p3.2xlarge", 16)  # one V100 an instance: every ring step over the 10 Gbit/s network
    assert flat.n == 16 and flat.ring_bandwidth == pytest.approx(10e9 / 8)
    with pytest.raises(ValueError, match=r"unknown instance type 'ml\.p9'.*ml\.p4d\.24xlarge"):
        am.topology_of("ml.p9", 2)


def test_an_instance_without_a_sourced_link_inside_is_refused(monkeypatch):
    table = am.instances()
    table.loc["ml.p4d.24xlarge", "intra_gbytes_per_s"] = float("nan")  # as a row whose source gives none
    monkeypatch.setattr(am, "instances", lambda: table)
    with pytest.raises(ValueError, match="no bandwidth between the GPUs of ml.p4d.24xlarge"):
        am.topology_of("ml.p4d.24xlarge", 2)
    assert am.topology_of("ml.p3.2xlarge", 2).n == 2  # one GPU an instance needs none


def test_published_cases_are_checked_from_their_own_inputs():
    import pandas as pd

    from utils.paths import DATA

    cases = pd.read_csv(DATA / "published_scaling.csv")
    checked = am.check_published(cases)
    assert len(checked) == len(cases)
    dgx1 = checked.set_index("case").loc["a_dgx1_v100_fp32"]
    # by hand: 8 V100 on NVLink (150 GB/s), 25.6 M float32 gradients: 14 steps of 3.4 us + 2 * 7/8 * 102.5 MB / 150 GB/s
    grad = 25_636_712 * 4
    assert dgx1["allreduce (ms)"] == pytest.approx(1e3 * (14 * 3.4e-6 + 1.75 * grad / 150e9), rel=1e-6)
    assert dgx1["compute (ms)"] == pytest.approx(1e3 * 128 / 412)
    # a case whose source lacks an input is listed, not predicted
    assert checked["not checked"].notna().sum() == checked.predicted.isna().sum() > 0
    for i, row in checked.iterrows():  # every miss gets a sentence naming the case
        if pd.notna(row.get("error")) and abs(row.error) > 0.15:
            assert am.why_missed(row, cases.iloc[i]).startswith(row.case)


def test_only_cases_where_the_allreduce_matters_test_the_model():
    import pandas as pd

    from utils.paths import DATA

    cases = pd.read_csv(DATA / "published_scaling.csv")
    checked = am.check_published(cases)
    bound = checked[checked.tests == "bound only"]
    assert len(bound) and (bound["allreduce / backward"] < 0.5).all() and (bound.predicted > 0.99).all()
    scaling = checked[(checked.tests == "communication") & (checked.measure == "scaling efficiency")]
    assert (scaling["allreduce / backward"] >= 0.5).all()
    # a bus bandwidth above what ring or tree can reach: NVLS is named only for GPUs whose NVSwitch adds
    p5 = cases[cases.case.str.contains("p5")].iloc[0]
    row = checked.set_index("case").loc[p5.case].copy()
    row["case"] = p5.case
    assert "NVSwitch itself can add" in am.why_missed(row, p5, cases)
    a100 = p5.copy()
    a100["gpu"] = "A100 80GB"
    assert "NVSwitch itself" not in am.why_missed(row, a100, cases)


def test_per_layer_overlap_by_hand():
    # A 3 s step, the backward pass its last 2 s (1 s to 3 s), three layers of 4, 2 and 2 bytes in backprop order,
    # their work in proportion to their bytes: ready at 2.0, 2.5 and 3.0 s; the link takes 0.5 s a byte.
    send = lambda nbytes: 0.5 * nbytes
    alone = am.overlap_step(3.0, [4, 2, 2], send, backward_share=2 / 3)
    # FIFO, one at a time: 2.0-4.0, 4.0-5.0 (ready at 2.5, waits for the link), 5.0-6.0
    assert [b[0] for b in alone.buffers] == pytest.approx([2.0, 4.0, 5.0])
    assert alone.seconds == pytest.approx(6.0) and alone.efficiency == pytest.approx(0.5)
    assert alone.exposed == pytest.approx(3.0)
    # Horovod 0.x's way: the thread sleeps 0.25 s after each cycle's allreduces and fuses up to 6 bytes; it wakes at
    # 2.0 (whole cycles from 0.25), sends layer 1 until 4.0, wakes at 4.25 and sends layers 2 and 3 fused: ends 6.25
    fused = am.overlap_step(3.0, [4, 2, 2], send, backward_share=2 / 3, fusion=am.Fusion("x", 6, 0.25, True, ""))
    assert [v for b in fused.buffers for v in b[:2]] == pytest.approx([2.0, 4.0, 4.25, 4.0])
    assert fused.seconds == pytest.approx(6.25)
    # the work share moves the ready times: all the backward work in the layer backprop reaches first makes every
    # gradient ready at 3.0 s (the others cost nothing), then FIFO: 3-5, 5-6, 6-7
    late = am.overlap_step(3.0, [4, 2, 2], send, layer_work=[1, 0, 0], backward_share=2 / 3)
    assert late.buffers[0][0] == pytest.approx(3.0) and late.seconds == pytest.approx(7.0)
    # the optimistic bound lets the whole 4 s allreduce start at 1.0 s: 5 s, above what the per-layer model allows
    bound = float(am.step_efficiency(3.0, 4.0, 2 / 3))
    assert bound == pytest.approx(3 / 5) and bound > alone.efficiency
    # an overhead is added to every step
    assert am.overlap_step(3.0, [4, 2, 2], send, overhead_seconds=0.5).seconds == pytest.approx(6.5)


def test_tensorflows_packs_by_hand():
    # the same step as above: layers of 4, 2 and 2 bytes ready at 2.0, 2.5 and 3.0 s, 0.5 s a byte
    send = lambda nbytes: 0.5 * nbytes
    # packs of more than 3 bytes close: [4], then [2, 2]; the second leaves when its last layer is ready (3.0) and
    # the first is done (4.0): 2.0-4.0, 4.0-6.0
    packed = am.overlap_step(3.0, [4, 2, 2], send, backward_share=2 / 3, fusion=am.Packs("x", 3))
    assert [v for b in packed.buffers for v in b[:2]] == pytest.approx([2.0, 4.0, 4.0, 4.0])
    assert packed.seconds == pytest.approx(6.0)
    # bytes_per_pack 0 (TensorFlow's default): one pack of all, sent once the last gradient is ready: 3.0-7.0
    one = am.overlap_step(3.0, [4, 2, 2], send, backward_share=2 / 3, fusion=am.Packs("x", 0))
    assert len(one.buffers) == 1 and one.buffers[0][0] == pytest.approx(3.0) and one.seconds == pytest.approx(7.0)


def test_tf_packs_group_as_tensorflows_own_function():
    """tf_packs against TensorFlow's cross_device_utils.group_by_size, on ResNet-50's layers in backward order."""
    import tensorflow as tf
    from tensorflow.python.distribute import cross_device_utils

    sizes = [int(b) for b in am.layer_gradients("ResNet-50 v1.5").gradient_bytes]
    tensors = [tf.zeros([b // 4], tf.float32) for b in sizes]  # float32: 4 bytes a value
    for bytes_per_pack in (0, 1, 4 * 2**20, 25 * 2**20, 50 * 2**20, 10**12):
        theirs = cross_device_utils.group_by_size(tensors, bytes_per_pack)
        ours = am.tf_packs(sizes, bytes_per_pack)
        assert [len(p) for p in ours] == [len(p) for p in theirs], bytes_per_pack
    with pytest.raises(ValueError, match="at least 0"):
        am.tf_packs(sizes, -1)


def test_a_row_above_the_ceiling_is_never_a_hit():
    import pandas as pd

    from utils.paths import DATA

    cases = pd.read_csv(DATA / "published_scaling.csv")
    compared = am.compare_published(cases)
    assert not compared.case.str.endswith("2020-08").any()  # superseded rows are left out
    above = compared.published > compared.ceiling
    assert above.any() and (compared[above]["class"] == "outside the model").all()
    p5 = compared.set_index("case").loc["c_nccl_allreduce_2x_p5_eks_2GiB"]
    # within 10 % of the prediction, yet above the ceiling: outside the model, not a hit
    assert abs(p5.error) <= 0.10 and p5["class"] == "outside the model"
    table = am.tally(compared)
    assert not table.configuration.duplicated().any()
    hits = int((table["class"] == "hit").sum())
    assert am.tally_sentence(table).startswith(f"{hits} of {int(table['class'].isin(['hit', 'miss']).sum())} ")
    # a configuration counted twice is refused
    twice = compared.copy()
    twice.loc[twice.case == "c_nccl_allreduce_2x_p5_2GiB", "counted"] = True
    with pytest.raises(ValueError, match="more than one counted row"):
        am.tally(twice)


def test_layer_sizes_are_keras_trainable_weights():
    import keras
    import pandas as pd

    from utils.paths import DATA

    stored = pd.read_csv(DATA / "keras_layer_gradients.csv")
    vgg = stored[stored.model == "VGG-16"].reset_index(drop=True)
    fresh = am.layer_table(keras.applications.VGG16(weights=None))
    keras.backend.clear_session()
    pd.testing.assert_frame_equal(vgg[["layer", "kind", "gradient_bytes", "macs"]], fresh, check_dtype=False)
    # by hand: VGG-16's fc1 is 25088 x 4096 weights + 4096 biases, its multiply-adds 25088 x 4096
    fc1 = vgg.set_index("layer").loc["fc1"]
    assert fc1.gradient_bytes == 4 * (25088 * 4096 + 4096) and fc1.macs == 25088 * 4096
    # trainable only: ResNet-50's BatchNorm moving statistics are not gradients
    assert stored[stored.model == "ResNet-50 v1.5"].gradient_bytes.sum() == 4 * 25_583_592
    assert list(am.layer_gradients("VGG-16").layer[:2]) == ["predictions", "fc2"]  # backprop order


def test_lab_efficiency_is_the_per_layer_model_with_fusion_and_cycle():
    layers, rates = [4e6, 1e6, 2e6, 0.5e6], np.array([1e6, 1e7, 1e8])
    # without fusion or cycle it is predicted_efficiency's per-layer model, rate by rate
    old = am.predicted_efficiency(
        0.3, 2, 0.4, sum(layers), rates, overlap=2 / 3, layer_bytes=layers, overhead_seconds=0.05
    )
    new = am.lab_efficiency(0.3, 0.4, layers, rates, am.UNFUSED, overhead_seconds=0.05)
    assert new == pytest.approx(old)
    assert isinstance(am.lab_efficiency(0.3, 0.4, layers, 1e7, am.UNFUSED), float)
    # a 10 ms cycle only delays (no per-call cost to save by fusing here): never a higher efficiency
    cycled = am.lab_efficiency(0.3, 0.4, layers, rates, am.horovod_fusion(10.0), overhead_seconds=0.05)
    assert np.all(cycled <= new + 1e-12)


def test_the_mechanism_names_only_what_the_case_ran():
    import pandas as pd

    above = pd.Series(
        {
            "case": "x",
            "class": "outside the model",
            "measure": "bus bandwidth (GB/s)",
            "published": 500.0,
            "ceiling": 400.0,
        }
    )
    assert "NVLS" in am.mechanism(above, pd.Series({"gpu": "H100", "library": "nccl-tests"}))
    assert "NVLS" not in am.mechanism(above, pd.Series({"gpu": "A100", "library": "nccl-tests"}))
    lost = pd.Series(
        {
            "case": "y",
            "class": "miss",
            "measure": "scaling efficiency",
            "published": 0.6,
            "predicted": 0.8,
            "GPUs": 512,
            "allreduce / backward": 0.9,
        }
    )
    old = pd.Series({"gpu": "P100", "library": "Horovod 0.12"})
    assert "negotiation" in am.mechanism(lost, old)
    assert "negotiation" not in am.mechanism(lost, pd.Series({"gpu": "P100", "library": "TensorFlow"}))
