"""Per-device training memory and the strategy advice: exact byte counts and each branch of the advice."""

from __future__ import annotations

import csv
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from utils import memory
from utils.memory import LayerNeeds, MemoryNeeds, recommend_strategy
from utils.paths import REPO_ROOT

LAYERS = [
    LayerNeeds("input", 0, 48),
    LayerNeeds("h0", 48 * 8 + 8, 8),
    LayerNeeds("h1", 8 * 8 + 8, 8),
    LayerNeeds("out", 8 * 24 + 24, 24),
]
PARAMS = 392 + 72 + 216


def test_stage_bytes_counts_each_kind():
    b = memory.stage_bytes(LAYERS, batch=10, optimizer="adam")
    assert b.parameters == b.gradients == PARAMS * 4
    assert b.optimizer == 2 * PARAMS * 4
    assert b.activations == (48 + 8 + 8 + 24) * 10 * 4
    assert b.total == 4 * PARAMS * 4 + 88 * 40
    assert memory.stage_bytes(LAYERS, 10, "sgd").optimizer == 0
    with pytest.raises(ValueError, match="optimizer must be one of"):
        memory.stage_bytes(LAYERS, 10, "adagrad")


def test_data_parallel_replicates_state_and_splits_activations():
    per = memory.data_parallel_bytes(LAYERS, global_batch=64, devices=4)
    assert len(per) == 4
    assert per[0].parameters == PARAMS * 4 and per[0].activations == 88 * 16 * 4
    with pytest.raises(ValueError, match="divide evenly"):
        memory.data_parallel_bytes(LAYERS, global_batch=10, devices=4)


def test_model_parallel_splits_state_and_sums_to_the_whole():
    per = memory.model_parallel_bytes(LAYERS, global_batch=64, devices=3)
    whole = memory.stage_bytes(LAYERS, 64)
    assert len(per) == 3
    assert sum(b.parameters for b in per) == whole.parameters
    assert sum(b.activations for b in per) == whole.activations
    assert per[0].activations == (48 + 8) * 64 * 4  # the input stays with the first stage


@given(st.integers(1, 10_000_000), st.floats(0, 1e5), st.integers(1, 512), st.floats(1e6, 1e12))
def test_advice_always_returns_a_strategy_that_fits_or_model_parallelism(params, acts, batch, device):
    rec = recommend_strategy(MemoryNeeds(params, acts, batch), device)
    assert rec.strategy in ("data parallelism", "model parallelism")
    assert rec.reasons and rec.tried
    if rec.strategy == "data parallelism":
        assert rec.tried[-1][2], "data parallelism is only advised with a configuration that fits"
    else:
        assert rec.devices_at_least >= 2


def test_fits_as_it_is():
    rec = recommend_strategy(MemoryNeeds(1_000_000, 1000, 32), device_bytes=16e9)
    assert rec.strategy == "data parallelism" and rec.changes == []
    assert "it fits" in rec.reasons[0]


def test_optimizer_state_is_the_first_remedy():
    # 1e9 params: Adam needs 16 GB, SGD 8 GB; device 10 GB
    rec = recommend_strategy(MemoryNeeds(1_000_000_000, 0, 1), device_bytes=10e9)
    assert rec.strategy == "data parallelism" and "SGD" in rec.changes[0]
    rec = recommend_strategy(MemoryNeeds(1_000_000_000, 0, 1), device_bytes=10e9, can_change_optimizer=False)
    assert rec.strategy == "model parallelism" and rec.devices_at_least == 2


def test_human_bytes():
    assert memory.human_bytes(512) == "512 B"
    assert memory.human_bytes(8.856e6) == "8.86 MB"
    assert memory.human_bytes(2.8e12) == "2.80 TB"


def test_smaller_batch_before_mixed_precision():
    # states 1.6 MB (sgd), activations 1e6 values x 4 B per example
    needs = MemoryNeeds(100_000, 1_000_000, 64, optimizer="sgd")
    rec = recommend_strategy(needs, device_bytes=100e6)
    assert rec.strategy == "data parallelism"
    assert rec.changes == ["a batch of 24 per device instead of 64"]  # (100e6 - 0.8e6) // 4e6 = 24
    # the batch may not go below 64: 16-bit activations (64 x 1e6 x 2 B = 128 MB + 0.8 MB) are next, and fit 130 MB
    rec = recommend_strategy(needs, device_bytes=130e6, min_batch=64)
    assert rec.changes == ["mixed precision"]
    assert [fits for _, _, fits in rec.tried] == [False, True]


def test_remedies_accumulate_when_none_is_enough_alone():
    # 1e6 params: Adam states 16 MB, SGD 8 MB; activations 1e5 values x 4 B = 0.4 MB per example, batch 64 = 25.6 MB.
    needs = MemoryNeeds(1_000_000, 100_000, 64, optimizer="adam")
    # 20 MB: SGD alone needs 33.6 MB, Adam with the smallest batch (16) 22.4 MB: neither fits; both together
    # (SGD, batch (20 - 8) // 0.4 = 30) need 20 MB.
    assert recommend_strategy(replace(needs, optimizer="sgd"), 20e6, min_batch=64).strategy == "model parallelism"
    rec = recommend_strategy(needs, 20e6, min_batch=16)
    assert rec.strategy == "data parallelism"
    assert rec.changes == ["an optimizer without state (SGD instead of adam)", "a batch of 30 per device instead of 64"]
    assert rec.tried[-1][2] and rec.tried[-1][1] <= 20e6


def test_input_shrink_then_model_parallelism():
    needs = MemoryNeeds(1000, 1_000_000, 64, optimizer="sgd")  # activations 256 MB at 4 B
    rec = recommend_strategy(needs, device_bytes=100e6, min_batch=64, input_shrink=0.25)
    assert rec.changes[0].startswith("a smaller input")
    rec = recommend_strategy(needs, device_bytes=50e6, min_batch=64)
    assert rec.strategy == "model parallelism" and rec.devices_at_least == 6  # ceil(256.008 MB / 50 MB)


def test_states_too_large_for_any_activation_remedy():
    rec = recommend_strategy(MemoryNeeds(175_000_000_000, 0, 1), device_bytes=80e9)
    assert rec.strategy == "model parallelism"
    assert any("alone need" in r for r in rec.reasons)
    assert rec.devices_at_least == 35  # 175e9 x 16 B / 80e9


def test_bad_inputs_say_what_to_do():
    with pytest.raises(ValueError, match="device_bytes"):
        recommend_strategy(MemoryNeeds(1, 1, 1), 0)
    with pytest.raises(ValueError, match="min_batch"):
        recommend_strategy(MemoryNeeds(1, 1, 8), 1e9, min_batch=9)
    with pytest.raises(ValueError, match="input_shrink"):
        recommend_strategy(MemoryNeeds(1, 1, 8), 1e9, input_shrink=1.5)


def test_layer_needs_of_the_course_model():
    from utils.model import build_forecaster

    needs = memory.layer_needs(build_forecaster(48, 24, width=16, depth=1))
    assert [n.name for n in needs] == ["past_hours", "hidden_0", "next_hours"]
    assert [n.parameters for n in needs] == [0, 48 * 16 + 16, 16 * 24 + 24]
    assert [n.activations_per_example for n in needs] == [48, 16, 24]


def test_model_sizes_file_has_a_source_for_every_row():
    with (REPO_ROOT / "data" / "model_sizes.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["kind"] for r in rows} == {"model", "device"}
    for r in rows:
        assert r["source"].strip(), f"{r['name']} has no source"
        if r["kind"] == "model":
            assert int(r["parameters"]) > 0
        else:
            assert float(r["memory"]) > 0 and r["memory_unit"] in ("GB", "GiB")


def test_devices_at_least_is_the_fewest_that_hold_the_model():
    # 1e9 parameters, Adam: 16e9 B of state; 0.3e6 activation values x 4 B x batch 1000 = 1.2e9 B: 17.2e9 B in all.
    needs = MemoryNeeds(1_000_000_000, 300_000, 1000)
    rec = recommend_strategy(needs, device_bytes=5e9, can_change_optimizer=False)
    assert rec.strategy == "model parallelism" and rec.devices_at_least == 4  # 3 x 5e9 < 17.2e9 <= 4 x 5e9
    # headroom: with a fifth of each device kept free, 4e9 B usable, 17.2e9 B needs 5 devices
    kept = recommend_strategy(needs, device_bytes=5e9, can_change_optimizer=False, headroom=0.2)
    assert kept.devices_at_least == 5


def test_headroom_decides_whether_a_state_fits():
    needs = MemoryNeeds(1_000_000_000, 0, 1)  # 16e9 B of float32 Adam state
    assert recommend_strategy(needs, 16 * 2**30).changes == []  # 17.18e9 B: it fits as it is
    kept = recommend_strategy(needs, 16 * 2**30, headroom=0.1)  # 15.46e9 B usable: plain SGD (8e9 B) is needed
    assert kept.strategy == "data parallelism" and kept.changes == ["an optimizer without state (SGD instead of adam)"]
    with pytest.raises(ValueError, match="headroom"):
        recommend_strategy(needs, 16 * 2**30, headroom=1.0)
