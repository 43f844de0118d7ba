"""Number formats, rounding, dtype policies and the lesson-06 helpers, against values worked out by hand."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from conftest import needs_horovod

from utils import data, envinfo, launch, paths, precision


def test_float16_limits_by_hand():
    info = precision.format_info("float16")
    assert info.max == 65504.0 == (2 - 2**-10) * 2**15
    assert info.smallest_normal == 2.0**-14
    assert info.smallest_subnormal == 2.0**-24
    assert info.epsilon == 2.0**-10
    assert info.bits == 16


def test_bfloat16_limits_by_hand():
    info = precision.format_info("bfloat16")
    assert info.epsilon == 2.0**-7 == 0.0078125
    assert info.smallest_normal == 2.0**-126
    assert info.max == (2 - 2**-7) * 2.0**127
    assert (info.exponent_bits, info.mantissa_bits, info.bits) == (8, 7, 16)


def test_tf32_and_fp8_limits():
    tf32 = precision.format_info("tf32")
    assert tf32.epsilon == 2.0**-10 and tf32.smallest_normal == 2.0**-126 and tf32.bits == 19
    assert precision.format_info("float8_e4m3fn").max == 448.0  # no infinity: the top code is a number
    assert precision.format_info("float8_e5m2").max == 57344.0 == 1.75 * 2**15


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16", "float8_e5m2"])
def test_bit_count_formula_matches_the_types(name):
    assert precision.ieee_limits(*precision.FORMAT_BITS[name], name=name) == precision.format_info(name)


def test_what_values_become():
    fp16 = precision.round_to([1e-8, 70_000.0, 1 + 2.0**-9, 3e-8, 65_519.0, 65_520.0], "float16")
    assert fp16[0] == 0.0  # below 2^-25, half the smallest subnormal
    assert np.isinf(fp16[1])
    assert fp16[2] == 1 + 2.0**-9
    assert fp16[3] == 2.0**-24  # just above 2^-25: rounds up to the smallest subnormal
    assert fp16[4] == 65504.0 and np.isinf(fp16[5])  # 65520 = 65504 + half a step: ties to even, to infinity
    bf16 = precision.round_to([1e-8, 70_000.0, 1 + 2.0**-9], "bfloat16")
    assert bf16[1] == 137 * 512  # steps of 2^16 x 2^-7 = 512 at 70 000
    assert bf16[2] == 1.0
    assert abs(bf16[0] / 1e-8 - 1) < 2.0**-8


def test_tf32_rounds_to_ten_mantissa_bits():
    assert precision.round_to(1 + 2.0**-11, "tf32") == 1.0  # a tie: to even
    assert precision.round_to(1 + 3 * 2.0**-11, "tf32") == 1 + 2.0**-9  # a tie: to even, upwards
    assert precision.round_to(1 + 2.0**-10, "tf32") == 1 + 2.0**-10


def test_bit_fields():
    assert precision.bit_fields(1.0, "float16") == ("0", "01111", "0000000000")
    assert precision.bit_fields(-2.0, "bfloat16") == ("1", "10000000", "0000000")
    assert precision.bit_fields(0.5, "float32") == ("0", "01111110", "0" * 23)
    assert precision.bit_fields(1.0, "float8_e4m3fn") == ("0", "0111", "000")


def test_fate_counts_zero_subnormal_overflow():
    values = [2.0**-26, 2.0**-20, 1.0, 1e5]
    assert precision.fate(values, "float16") == {"zero": 0.25, "subnormal": 0.25, "overflow": 0.25}
    # x 2^10: 2^-26 -> 2^-16 (subnormal), 2^-20 -> 2^-10 (normal), 1e5 -> still above 65504
    assert precision.fate(values, "float16", scale=2.0**10) == {"zero": 0.0, "subnormal": 0.25, "overflow": 0.25}
    assert precision.fate(values, "bfloat16") == {"zero": 0.0, "subnormal": 0.0, "overflow": 0.0}


def test_required_scale():
    assert precision.required_scale(1e-10) == 2.0**20  # 2^-14 / 1e-10 = 610 352
    assert precision.required_scale(2e-9) == 2.0**15  # 30 518 -> 32 768
    assert precision.required_scale(1.0) == 1.0
    assert precision.required_scale(2.0**-20, "bfloat16") == 1.0


@pytest.mark.parametrize("bad", ["int8", np.int32, "uint16"])
def test_non_float_dtype_is_refused_clearly(bad):
    with pytest.raises(TypeError, match="not a floating-point type"):
        precision.storage_type(bad)


def test_unknown_names_are_refused_clearly():
    with pytest.raises(ValueError, match="unknown number format 'float12'"):
        precision.format_info("float12")
    with pytest.raises(ValueError, match="round_to"):
        precision.storage_type("tf32")
    with pytest.raises(ValueError, match="mixed_bfloat16"):
        precision.check_policy("mixed_float8")
    with pytest.raises(ValueError, match="mixed_bfloat16"):
        precision.build_forecaster("bfloat16_mixed")
    with pytest.raises(ValueError, match="positive"):
        precision.required_scale(0.0)
    with pytest.raises(ValueError, match="bits"):
        precision.ieee_limits(1, 3)


def test_policies_give_float32_variables_and_16_bit_compute():
    net = precision.build_forecaster("mixed_bfloat16", width=8, depth=1)
    rows = {r["layer"]: r for r in precision.layer_dtypes(net)}
    assert rows["hidden_0"]["variables"] == "float32" and rows["hidden_0"]["compute"] == "bfloat16"
    assert rows["hidden_0"]["output"] == "bfloat16"
    assert rows["output_float32"]["output"] == "float32" and str(net.output.dtype) == "float32"
    assert keras.config.dtype_policy().name == "float32", "the global policy must be restored"


def test_compile_wraps_the_optimizer_only_for_mixed_float16():
    kinds = {}
    for policy in precision.POLICIES:
        net = precision.build_forecaster(policy, width=8, depth=1)
        net.compile(optimizer=keras.optimizers.Adam(), loss="mse")
        kinds[policy] = type(net.optimizer).__name__
    assert kinds == {"float32": "Adam", "mixed_bfloat16": "Adam", "mixed_float16": "LossScaleOptimizer"}


def test_dense_flops_by_hand():
    net = precision.build_forecaster("float32", lookback=4, horizon=2, width=3, depth=1)
    assert precision.dense_flops(net, batch=10) == 6 * (4 * 3 + 3 * 2) * 10


def test_weighted_loss_with_scaled_epsilon_trains_float32_identically():
    splits = data.prepare(data.synthetic_series(24 * 40, seed=1))
    plain = precision.train_weighted("float32", splits, epochs=2, loss_weight=1.0, batch_size=128)
    weighted = precision.train_weighted("float32", splits, epochs=2, loss_weight=2.0**-15, batch_size=128)
    # lesson 06 says "value for value": multiplying by a power of two is exact, so nothing may differ
    assert plain["val_mse"] == weighted["val_mse"]


def test_unscaled_float16_loses_small_gradients_that_bfloat16_keeps():
    splits = data.prepare(data.synthetic_series(24 * 40, seed=1))
    rng = np.random.default_rng(0)
    net = precision.build_forecaster("float32", width=16, depth=1)
    idx = rng.integers(0, len(splits.x_train), 64)
    mags = precision.gradient_magnitudes(net, splits.x_train[idx], splits.y_train[idx], loss_weight=2.0**-30)
    every = np.concatenate([g.ravel() for g in mags.values()])
    assert precision.fate(every, "float16")["zero"] > 0.5
    assert precision.fate(every, "bfloat16")["zero"] == 0.0


def test_fp16_average_expected_by_hand():
    expected = precision.fp16_average_expected(2)
    # rank 0: 1 + 2^-12 -> 1, rank 1: 2 + 2^-11 -> 2 (less than half a float16 step); 1e-8, 2e-8 -> 0
    assert expected.tolist() == [1.5, 4.5, 0.0, 1.5 * 2.0**-5]


def test_fp16_average_rounds_the_halved_sum_to_float16():
    # 2^-24 (float16's smallest subnormal) + 0, halved: 2^-25 is a tie between 0 and 2^-24 and goes to the even 0;
    # 3 x 2^-24 halved is 1.5 x 2^-24, a tie between 2^-24 and 2^-23, and goes to the even 2^-23
    got = precision.fp16_average(np.array([[2.0**-24, 3 * 2.0**-24, 1.0], [0.0, 0.0, 2.0]]))
    assert got.dtype == np.float32
    assert got.tolist() == [0.0, 2.0**-23, 1.5]
    with pytest.raises(ValueError, match="one row per rank"):
        precision.fp16_average(np.array(1.0))


def test_fp16_sum_of_scaled_values_overflows_unless_prescaled():
    big = np.full((2, 1), 0.75 * 65504.0)  # each within float16's range, their sum not
    assert np.isinf(precision.fp16_average(big)[0])  # summed in float16 first, then halved: inf stays inf
    assert precision.fp16_average(big, prescale=True)[0] == np.float16(0.75 * 65504.0)
    tiny = np.full((8, 1), 2.0**-23)  # 2 x float16's smallest subnormal
    assert precision.fp16_average(tiny)[0] == 2.0**-23  # 8 x 2^-23 = 2^-20, divided by 8: exact
    assert precision.fp16_average(tiny, prescale=True)[0] == 0.0  # 2^-26 flushes to 0 before the sum


def test_compression_breakeven_by_hand():
    best = {"none": 2.0, "fp16": 6.0, "one value per tensor": 1.0}  # ms
    got = precision.compression_breakeven(best, saved_bytes=600_000)
    assert got["added_low"] == pytest.approx(4e-3) and got["added_high"] == pytest.approx(4.5e-3)
    assert got["rate_high"] == pytest.approx(600_000 / 4e-3) and got["rate_low"] == pytest.approx(600_000 / 4.5e-3)
    free = precision.compression_breakeven({**best, "fp16": 1.5}, 600_000)  # faster even on loopback
    assert free["rate_high"] == free["rate_low"] == float("inf")
    with pytest.raises(ValueError, match="saved_bytes must be positive"):
        precision.compression_breakeven(best, 0)


def test_check_without_an_answer_does_not_launch(capsys):
    assert precision.check_fp16_allreduce(None) is False
    assert "not answered yet" in capsys.readouterr().out


def _plain_average(grad):
    import horovod.tensorflow as hvd

    return hvd.allreduce(grad, op=hvd.Average)


@needs_horovod
def test_fp16_exercise_check_rejects_a_plain_average(capsys):
    """That it accepts an answer that compresses is asserted by lesson 06's solution cell, which CI runs; the
    rejected function here lives in a module the ranks cannot import, so it also travels by value."""
    assert precision.check_fp16_allreduce(_plain_average) is False
    assert "Compression.fp16" in capsys.readouterr().out


def _misspelt_compression(grad):
    import horovod.tensorflow as hvd

    return hvd.allreduce(grad, op=hvd.Average, compression=hvd.Compression.half)


@needs_horovod
def test_an_answer_that_raises_on_the_ranks_is_named_in_one_line(capsys):
    """A typo in the learner's function: the exception it raised on the ranks and the line, not Horovod's runner's
    traceback."""
    assert precision.check_fp16_allreduce(_misspelt_compression) is False
    out = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(
        r"\[fp16 allreduce\] your function failed on the ranks: AttributeError: type object 'Compression' has no "
        r"attribute 'half' \(line \d+ of .*test_precision\.py\)\. Fix that line and run the cell again\.",
        out[-1],
    ), out


def test_the_exception_line_is_the_failing_ranks_own():
    tagged = launch.WorkerError(
        "The run failed: rank 0 exited with code 1.\n--- end of worker 0's log (logs/0.log) ---\n"
        '[0]<stderr>:Traceback (most recent call last):\n[0]<stderr>:  File "ipykernel_7/1.py", line 4, in f\n'
        "[0]<stderr>:ValueError: bad shape\n[1]<stderr>:tensorflow.python.framework.errors_impl.InternalError: "
        "peer gone\nFull logs: logs",
        0,
        "exited with code 1",
        Path("logs"),
    )
    assert launch.exception_line(tagged) == "ValueError: bad shape (line 4 of the cell that defines it)"
    # tf.distribute workers, one log each: worker 1's lost peer comes after worker 0's own error
    logs = (
        "The run failed: worker 0 exited with code 1.\n--- end of worker 0's log (logs/0.log) ---\nTraceback:\n"
        '  File "scripts/exercises/mwms_todo.py", line 31, in <module>\n    strategy = tf.distribute.Foo()\n'
        "AttributeError: module 'tensorflow._api.v2.distribute' has no attribute 'Foo'\n"
        "--- end of worker 1's log (logs/1.log) ---\ntensorflow.python.framework.errors_impl.UnavailableError: "
        "Collective ops is aborted\nFull logs: logs"
    )
    worker = launch.WorkerError(logs, 0, "exited with code 1", Path("logs"))
    assert launch.exception_line(worker) == (
        "AttributeError: module 'tensorflow._api.v2.distribute' has no attribute 'Foo' "
        "(line 31 of scripts/exercises/mwms_todo.py)"
    )
    bare = launch.WorkerError(
        "--- end of worker 1's log (l) ---\n[1,1]<stderr>:AssertionError\n[1,0]<stderr>:RuntimeError: Horovod has "
        "been shut down\nFull logs: l",
        1,
        "exited with code 1",
        Path("l"),
    )
    assert launch.exception_line(bare) == "AssertionError"  # a bare assert, under mpirun's [job,rank] tag
    assert launch.exception_line(RuntimeError("a worker hung for 300 s")) is None


@needs_horovod
def test_allreduce_worker_halves_bytes_and_keeps_ranks_identical():
    args = ["--width", "64", "--depth", "1", "--batch-size", "64", "--rounds", "1", "--repeats", "4", "--steps", "3"]
    ranks = launch.launch_horovodrun(
        paths.WORKERS / "precision_allreduce.py", np=2, args=args, timeout=240, stream=False
    ).records()
    assert [r["rank"] for r in ranks] == [0, 1]
    params = 48 * 64 + 64 + 64 * 24 + 24
    assert ranks[0]["parameters"] == params
    assert ranks[0]["tensor_bytes"] == {"none": 4 * params, "fp16": 2 * params}
    # bytes written to the sockets: at 2 ranks a ring sends K per rank, plus small negotiation messages (the fewest
    # of 4 calls: a call that waits longer for a slowed rank carries more of the background thread's coordination)
    written = ranks[0]["allreduce"]
    assert 4 * params <= written["none"]["bytes_written"] < 4 * params + 4096
    assert 2 * params <= written["fp16"]["bytes_written"] < 2 * params + 4096
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    # the compressed average is exactly what fp16_average computes from both ranks' gradients
    assert all(r["fidelity"]["equal_to_numpy"] for r in ranks)


def test_memory_worker_counts_bytes(tmp_path):
    run = launch.launch_tf_workers(
        paths.WORKERS / "precision_memory.py",
        1,
        args=["--policies", "float32", "mixed_bfloat16", "--batches", "256", "--width", "256", "--depth", "1"]
        + ["--no-remapping"],
        env={"TF_CPU_ALLOCATOR_USE_BFC": "true"},
        timeout=240,
        stream=False,
    )
    assert run.records()[0]["remapping"] is False
    rows = {r["policy"]: r for r in run.records()[0]["rows"]}
    params = 48 * 256 + 256 + 256 * 24 + 24
    for r in rows.values():
        # weights and Adam's two slots, all float32, are held between steps
        assert r["held_bytes"] >= 3 * 4 * params
        assert r["peak_bytes"] > r["held_bytes"]
    assert json.dumps(rows)  # plain JSON values


def test_without_remapping_runs_float16_layers_at_the_speed_of_the_ops_and_restores_the_setting():
    import tensorflow as tf

    before = precision.float16_fusion_probe(128)
    with pytest.raises(RuntimeError, match="inside"), precision.without_remapping():
        assert tf.config.optimizer.get_experimental_options()["remapping"] is False
        inside = precision.float16_fusion_probe(128)
        raise RuntimeError("inside")
    assert tf.config.optimizer.get_experimental_options()["remapping"] is True
    # without the fusion a traced float16 layer costs about what its ops cost one by one, whatever the CPU
    assert not inside.slow, inside
    assert inside.eager_s > 0 and before.graph_s > 0


def test_fusion_probe_refuses_a_size_it_cannot_time():
    with pytest.raises(ValueError, match="at least 16"):
        precision.float16_fusion_probe(4)


def test_memory_worker_refuses_to_run_without_the_bfc_allocator():
    with pytest.raises(launch.WorkerError, match="set TF_CPU_ALLOCATOR_USE_BFC=true"):
        launch.launch_tf_workers(paths.WORKERS / "precision_memory.py", 1, timeout=120, stream=False)


def _float16_stderr(quiet_first: bool) -> subprocess.CompletedProcess:
    """stderr of a fresh Python that runs float16 operations, after quiet_onednn_half_notice() or not."""
    code = (
        "import tensorflow as tf\nfrom utils import precision\n"
        + ("print('DROPPED:', repr(precision.quiet_onednn_half_notice()))\n" if quiet_first else "")
        + "x = tf.ones((8, 8), tf.float16)\nprint(float(tf.reduce_sum(tf.matmul(x, x))))\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"}  # what a learner's kernel has: every level shown
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=True
    )


def test_the_onednn_float16_notice_is_dropped_and_nothing_else():
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    plain = _float16_stderr(quiet_first=False)
    quiet = _float16_stderr(quiet_first=True)
    assert quiet.stdout.endswith("512.0\n") and plain.stdout == "512.0\n"
    assert precision.ONEDNN_HALF_NOTICE not in quiet.stderr
    if precision.ONEDNN_HALF_NOTICE in plain.stderr:  # this CPU's oneDNN has no float16 kernels: dropped, not lost
        assert not flags & {"avx512_fp16", "amx_fp16", "avx_ne_convert"}
        assert precision.ONEDNN_HALF_NOTICE in quiet.stdout


def test_the_exercise_checks_accept_the_right_answers_and_reject_wrong_ones(capsys):
    """Lesson 06's exercises 1 to 3: each check derives its answer from the formats, out of the learner's view."""
    values = [3e-8, 1e-7, 6e-5, 70_000.0, 65_519.0]
    assert precision.check_survivors([True, True, True, False, True], values)
    assert not precision.check_survivors([False, True, True, False, False], values)  # 3e-8 rounds up, 65 519 down
    assert not precision.check_survivors([True, True, True, False], values)
    assert precision.check_loss_scale(2.0**15, 2e-9)
    assert not precision.check_loss_scale(2.0**14, 2e-9)
    assert precision.check_bfloat16_normal(-126, True, 1e-30)
    assert not precision.check_bfloat16_normal(-14, True, 1e-30)  # float16's
    assert not precision.check_bfloat16_normal(-126, True, 1e-39)  # below 2^-126: a subnormal
    assert not precision.check_survivors(None, values)
    out = capsys.readouterr().out
    assert "not answered yet" in out and "correct" in out and "not quite" in out
    assert "2^-14" not in out and "1 - bias" in out  # hints point the way without doing the arithmetic


def test_the_layer_dtype_check_builds_the_model_and_restores_the_policy(capsys):
    import keras

    before = keras.config.dtype_policy().name
    assert precision.two_layer_dtypes() == ("float32", "bfloat16")
    assert precision.check_layer_dtypes("float32", "bfloat16")
    assert not precision.check_layer_dtypes("bfloat16", "bfloat16")
    assert not precision.check_layer_dtypes("float32", "float32")
    assert keras.config.dtype_policy().name == before
    assert "not quite" in capsys.readouterr().out


def test_onednn_trace_lines_are_read_into_primitives():
    lines = [
        "onednn_verbose,v1,primitive,exec,cpu,matmul,ref:any,undef,src_f16::blocked:ab:f0 wei_f16::blocked:ab:f0 "
        "dst_f16::blocked:ab:f0,attr-post-ops:eltwise_relu,,256x256:256x256,12.5",
        "onednn_verbose,v1,primitive,exec,cpu,gemm_api,,undef,src_f32::blocked:ab:f0 wei_f32::blocked:ab:f0,,,16x256,0.1",
        "onednn_verbose,v1,primitive,exec,cpu,matmul,ref:any,undef,src_f16::blocked:ab:f0,,,256x256,12.0",
    ]
    trace = precision.OneDnnTrace(onednn_on=True, half_notice="", exec_lines=lines)
    assert trace.primitives() == ["matmul ref:any (f16)", "gemm_api (implementation not named) (f32)"]
    slow = precision.FusionProbe(n=256, eager_s=1e-3, graph_s=50e-3, unfused_s=1.2e-3)
    text = precision.describe_fusion(slow, trace, envinfo.CpuInfo("cpu", 2, 2, {"avx512bw", "avx512_fp16"}))
    assert "test passed" in text and "reference implementation" in text and "turns the remapper off" in text
    off = precision.OneDnnTrace(onednn_on=False, half_notice="", exec_lines=lines[1:2])
    fast = precision.FusionProbe(n=256, eager_s=1e-3, graph_s=1.1e-3, unfused_s=1e-3)
    text = precision.describe_fusion(fast, off, envinfo.CpuInfo("cpu", 2, 2, set()))
    assert "**off**" in text and "computed in float32" in text and "as it comes" in text and "under the 10×" in text


def test_onednn_trace_runs_the_traced_layer_in_a_fresh_process():
    trace = precision.onednn_trace(64)
    assert trace.onednn_on == precision.onednn_enabled()
    assert trace.exec_lines or not trace.onednn_on, "oneDNN is on, so the traced layer leaves exec lines"
    assert all(",exec," in line for line in trace.exec_lines)
