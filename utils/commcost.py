"""Communication cost models: the latency-bandwidth (alpha-beta) fit, and allreduce time on a cluster."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class AlphaBeta:
    """t(bytes) = alpha + bytes / beta: alpha in seconds, beta in bytes per second."""

    alpha: float
    beta: float

    def predict(self, nbytes) -> np.ndarray:
        """Predicted seconds for messages of `nbytes` bytes."""
        return self.alpha + np.asarray(nbytes, dtype=float) / self.beta


def fit_alpha_beta(nbytes, seconds) -> AlphaBeta:
    """Least-squares fit of t = alpha + bytes/beta on relative errors (every size counts the same)."""
    x, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if x.shape != t.shape or x.size < 2:
        raise ValueError("give at least two (bytes, seconds) measurements of equal length")
    if np.any(t <= 0):
        raise ValueError("times must be positive")
    design = np.stack([np.ones_like(x), x], axis=1) / t[:, None]  # divide each row by t: relative residuals
    (alpha, inv_beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if inv_beta <= 0:
        raise ValueError("the measurements do not grow with size: cannot fit a bandwidth")
    return AlphaBeta(alpha=max(float(alpha), 0.0), beta=1.0 / float(inv_beta))


def relative_errors(model: AlphaBeta, nbytes, seconds) -> np.ndarray:
    """(predicted - measured) / measured for each measurement."""
    t = np.asarray(seconds, dtype=float)
    return (model.predict(nbytes) - t) / t


def ring_allreduce_seconds(n, nbytes: float, link_bytes_per_s: float, step_latency: float) -> np.ndarray:
    """Ring allreduce time: 2(n-1) steps of latency plus 2(n-1)/n of the buffer through each link."""
    n = np.asarray(n, dtype=float)
    return 2 * (n - 1) * step_latency + 2 * (n - 1) / n * nbytes / link_bytes_per_s


def parameter_server_seconds(
    n, nbytes: float, link_bytes_per_s: float, latency: float, servers: int = 1, overlap: bool = True
) -> np.ndarray:
    """Synchronous push-pull through `servers` parameter servers, each server link carrying n/servers buffers each way.

    With `overlap` (the default) the pushes and pulls overlap on a full-duplex link (the model's tensors are
    pipelined: new weights of one go out while gradients of the next come in), so one direction's time counts:
    n K / (servers B). Without it the server pulls only after every push has arrived, and both count: 2 n K / (servers B).
    """
    n = np.asarray(n, dtype=float)
    if servers < 1:
        raise ValueError(f"servers must be at least 1, got {servers}")
    one_way = n * nbytes / servers / link_bytes_per_s
    return 2 * latency + (one_way if overlap else 2 * one_way)


def gbit_to_bytes_per_s(gbit_per_s: float) -> float:
    """Convert a link speed in Gb/s to bytes per second."""
    return gbit_per_s * 1e9 / 8


def aes_gcm_rates(nbytes: int = 4 << 20, repeats: int = 9) -> tuple[float, float]:
    """Bytes per second that one core of this machine encrypts and decrypts with AES-256-GCM (best of `repeats`,
    after a warm-up, sealing and opening in alternation so that both see the same machine)."""
    import os
    import time

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if nbytes < 16 or repeats < 1:
        raise ValueError(f"nbytes must be at least 16 and repeats at least 1, got {nbytes}, {repeats}")
    # One key and one nonce for every call: acceptable in a benchmark only; real traffic needs a fresh nonce per message.
    aead, nonce, data = AESGCM(AESGCM.generate_key(bit_length=256)), os.urandom(12), os.urandom(nbytes)
    sealed = aead.encrypt(nonce, data, None)  # warm-up
    opened = aead.decrypt(nonce, sealed, None)
    best_enc = best_dec = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        sealed = aead.encrypt(nonce, data, None)
        middle = time.perf_counter()
        opened = aead.decrypt(nonce, sealed, None)
        best_enc, best_dec = min(best_enc, middle - start), min(best_dec, time.perf_counter() - middle)
    if opened != data:
        raise RuntimeError("AES-GCM did not give back the bytes it sealed")
    return nbytes / best_enc, nbytes / best_dec


def encrypted_slowdown(
    link_bytes_per_s: float, encrypt_bytes_per_s: float, decrypt_bytes_per_s: float
) -> tuple[float, float]:
    """How much longer a ring allreduce's bytes take when every host seals what it sends and opens what it receives
    on one core, against the plain link: (one after the other: link + seal + open, the worst case; overlapped:
    the slower of the link and the core's seal + open, the best case)."""
    rates = np.array([link_bytes_per_s, encrypt_bytes_per_s, decrypt_bytes_per_s], dtype=float)
    if np.any(rates <= 0):
        raise ValueError(f"rates must be positive bytes per second, got {rates.tolist()}")
    plain, crypto = 1 / rates[0], 1 / rates[1] + 1 / rates[2]
    return float((plain + crypto) / plain), float(max(plain, crypto) / plain)
