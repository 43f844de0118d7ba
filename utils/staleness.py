"""Asynchronous updates in miniature: a NumPy MLP trained on gradients computed from stale weights."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np


def _mlp_init(n_in: int, hidden: int, n_out: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.normal(0, np.sqrt(2 / n_in), (n_in, hidden)),
        np.zeros(hidden),
        rng.normal(0, np.sqrt(1 / hidden), (hidden, n_out)),
        np.zeros(n_out),
    ]


def mlp_loss_and_grads(params: Sequence[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """Mean squared error of a one-hidden-layer ReLU network and its gradient (NumPy, by hand)."""
    w1, b1, w2, b2 = params
    z = x @ w1 + b1
    h = np.maximum(z, 0.0)
    pred = h @ w2 + b2
    err = pred - y
    loss = float(np.mean(err**2))
    d_pred = 2.0 * err / err.size
    d_h = d_pred @ w2.T
    d_z = d_h * (z > 0)
    return loss, [x.T @ d_z, d_z.sum(0), h.T @ d_pred, d_pred.sum(0)]


def train_with_staleness(
    x: np.ndarray,
    y: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    *,
    staleness: int,
    steps: int,
    lr: float,
    batch_size: int = 64,
    hidden: int = 32,
    seed: int = 0,
    eval_every: int = 10,
) -> tuple[np.ndarray, np.ndarray]:
    """SGD in which the gradient applied at step t was computed on the weights of step t − `staleness`.

    This is what an asynchronous worker does: it reads the weights, computes, and by the time its gradient
    arrives the others have applied `staleness` updates. Returns (steps, validation loss) every `eval_every` steps
    (inf once the loss overflows).
    """
    if staleness < 0 or steps < 1 or lr <= 0 or batch_size < 1:
        raise ValueError("need staleness >= 0, steps >= 1, lr > 0 and batch_size >= 1")
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    params = _mlp_init(x.shape[1], hidden, y.shape[1], seed)
    history: deque[list[np.ndarray]] = deque([params], maxlen=staleness + 1)
    rng = np.random.default_rng(seed + 1)
    at, losses = [], []
    with np.errstate(all="ignore"):
        for t in range(steps + 1):
            if t % eval_every == 0 or t == steps:
                val = mlp_loss_and_grads(params, x_val, y_val)[0]
                at.append(t)
                losses.append(val if np.isfinite(val) else np.inf)
                if not np.isfinite(val):
                    break
            if t == steps:
                break
            idx = rng.integers(0, len(x), batch_size)
            old = history[0]  # the weights `staleness` updates ago (or the oldest kept, early on)
            _, g = mlp_loss_and_grads(old, x[idx], y[idx])
            params = [p - lr * gi for p, gi in zip(params, g)]
            history.append(params)
    return np.array(at), np.array(losses)
