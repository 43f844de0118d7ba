"""Logical TensorFlow devices: one CPU split into N, so strategies have N replicas on a laptop."""

from __future__ import annotations

import numpy as np


def use_logical_cpus(n: int) -> list[str]:
    """Split the CPU into `n` logical TensorFlow devices (call before TensorFlow starts); return their names."""
    import tensorflow as tf

    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a whole number of devices, at least 1; got {n!r}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    except RuntimeError as exc:
        have = tf.config.list_logical_devices("CPU")
        if len(have) < n:
            raise RuntimeError(
                f"TensorFlow has already started with {len(have)} CPU device(s), and devices cannot be added "
                f"afterwards. Restart the kernel and call use_logical_cpus({n}) before any other TensorFlow "
                "call (building a model or a tensor starts TensorFlow)."
            ) from exc
    return [d.name for d in tf.config.list_logical_devices("CPU")][:n]
