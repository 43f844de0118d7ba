"""What encrypting a ring's traffic costs, and link speeds in bytes per second (the allreduce cost model itself is
utils.allreduce_model)."""

from __future__ import annotations

import numpy as np


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
