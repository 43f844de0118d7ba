"""Ring allreduce from scratch: a step-by-step NumPy simulation, its traffic counts, and a multi-process run.

N workers sit in a ring; worker i sends to worker (i + 1) mod N. The vector of K values is cut into
N chunks (numpy.array_split boundaries: the first K mod N chunks hold one value more).
- Scatter-reduce, N - 1 steps: at step s worker i sends chunk (i - s) mod N and adds the chunk it
  receives. Afterwards worker i holds the complete sum of chunk (i + 1) mod N.
- Allgather, N - 1 steps: at step s worker i sends chunk (i + 1 - s) mod N and overwrites its copy
  with the one it receives. Afterwards every worker holds every summed chunk.
Worker i sends every chunk but (i + 1) mod N in the first phase and every chunk but (i + 2) mod N in
the second, hence `ring_traffic_values`. Worker i receives what worker i - 1 sends: when N does not
divide K the chunks differ in size, and a worker receives a different count from the one it sends
(N = 7, K = 1003: worker 0 sends 1719 values and receives 1718).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

PHASES = ("scatter-reduce", "allgather")
HEADER = struct.Struct("!Q")  # 8-byte length prefix of every chunk sent over a socket


@dataclass
class Step:
    """One transfer of the simulated ring: who sent which chunk to whom, and its values."""

    phase: str
    step: int
    sender: int
    receiver: int
    chunk: int
    values: np.ndarray


@dataclass
class RingResult:
    """Every worker's final vector and what each worker sent and received, per phase."""

    outputs: list[np.ndarray]
    sent_values: dict[str, list[int]]
    received_values: dict[str, list[int]]
    itemsize: int
    steps_per_phase: int
    trace: list[Step] = field(default_factory=list)

    def total_sent_values(self, worker: int) -> int:
        """Values worker `worker` sent over both phases."""
        return sum(self.sent_values[p][worker] for p in PHASES)

    def total_sent_bytes(self, worker: int) -> int:
        """Bytes worker `worker` sent over both phases."""
        return self.total_sent_values(worker) * self.itemsize


def chunk_sizes(k: int, n: int) -> list[int]:
    """Sizes of the n chunks of a k-value vector (numpy.array_split: the first k mod n get one more)."""
    if n < 1:
        raise ValueError(f"the number of workers must be at least 1, got {n}")
    if k < 0:
        raise ValueError(f"the vector length must be at least 0, got {k}")
    return [k // n + (1 if c < k % n else 0) for c in range(n)]


def _check_inputs(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(arrays) == 0:
        raise ValueError("ring_allreduce needs one array per worker; it was given an empty list")
    arrays = [np.asarray(a) for a in arrays]
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ValueError(
            f"every worker must hold an array of the same shape, got {sorted(shapes)}; "
            "pad or reshape them to one shape first"
        )
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        raise TypeError(
            f"every worker must hold the same dtype, got {sorted(map(str, dtypes))}; "
            "cast them with .astype(one_dtype) first"
        )
    dtype = arrays[0].dtype
    if not np.issubdtype(dtype, np.floating):
        raise TypeError(f"ring_allreduce works on floating-point arrays, got {dtype}; cast with .astype(np.float32)")
    return [a.reshape(-1) for a in arrays]  # any shape is summed element-wise, as a flat vector


def ring_allreduce(arrays: Sequence[np.ndarray], average: bool = False, trace: bool = False) -> RingResult:
    """Simulate the ring allreduce of one array per worker; every output is the element-wise sum (or mean)."""
    flat = _check_inputs(arrays)
    shape = np.asarray(arrays[0]).shape
    n, k, dtype = len(flat), flat[0].size, flat[0].dtype
    bounds = np.cumsum([0] + chunk_sizes(k, n))
    buf = [a.copy() for a in flat]

    def chunk(w: int, c: int) -> np.ndarray:
        return buf[w][bounds[c] : bounds[c + 1]]

    sent = {p: [0] * n for p in PHASES}
    received = {p: [0] * n for p in PHASES}
    steps: list[Step] = []
    for phase in PHASES:
        for s in range(n - 1):
            # All workers send at once: take every outgoing chunk before anyone updates.
            outgoing = []
            for i in range(n):
                c = (i - s) % n if phase == "scatter-reduce" else (i + 1 - s) % n
                outgoing.append((i, (i + 1) % n, c, chunk(i, c).copy()))
            for sender, receiver, c, values in outgoing:
                if phase == "scatter-reduce":
                    chunk(receiver, c)[:] += values
                else:
                    chunk(receiver, c)[:] = values
                sent[phase][sender] += values.size
                received[phase][receiver] += values.size
                if trace:
                    steps.append(Step(phase, s, sender, receiver, c, values))
    outputs = [(b / n).astype(dtype) if average else b for b in buf]
    return RingResult([o.reshape(shape) for o in outputs], sent, received, dtype.itemsize, max(n - 1, 0), steps)


def format_trace(result: RingResult) -> str:
    """The trace of a simulated run as readable lines: phase, step, who sends which chunk to whom."""
    lines = []
    for st in result.trace:
        values = np.array2string(st.values, precision=3, separator=", ")
        lines.append(
            f"{st.phase:>14} step {st.step}: worker {st.sender} -> worker {st.receiver}  chunk {st.chunk} = {values}"
        )
    return "\n".join(lines)


def ring_traffic_values(n: int, k: int) -> list[int]:
    """Exact values each worker sends in a ring allreduce of k values on n workers.

    Worker i sends all chunks but (i+1) mod n, then all but (i+2) mod n: 2k - size[(i+1)%n] - size[(i+2)%n].
    It receives what its left neighbour i-1 sends, entry (i-1) mod n of this list, not its own entry.
    """
    sizes = chunk_sizes(k, n)
    if n == 1:
        return [0]
    return [2 * k - sizes[(i + 1) % n] - sizes[(i + 2) % n] for i in range(n)]


def ring_traffic_per_phase(n: int, k: int) -> dict[str, list[int]]:
    """Exact values each worker sends in each phase: k - size[(i+1)%n], then k - size[(i+2)%n]."""
    sizes = chunk_sizes(k, n)
    if n == 1:
        return {p: [0] for p in PHASES}
    return {
        PHASES[0]: [k - sizes[(i + 1) % n] for i in range(n)],
        PHASES[1]: [k - sizes[(i + 2) % n] for i in range(n)],
    }


def busiest_ring_traffic(n: int, k: int) -> int:
    """Values the busiest worker sends: 2k - 2 floor(k/n), less one more when only one chunk is small."""
    return 2 * k - 2 * (k // n) - (1 if n >= 2 and k % n == n - 1 else 0)


def ring_traffic_ideal(n: int, k: float) -> float:
    """The textbook per-worker traffic 2(n - 1)k / n, exact when n divides k."""
    return 2 * (n - 1) * k / n


def parameter_server_traffic(n: int, k: float) -> dict[str, float]:
    """Values each worker and one parameter server (holding all k values) send per step; each receives as many."""
    return {"worker": k, "server": n * k}


def all_to_all_traffic(n: int, k: float) -> float:
    """Values each worker sends when every worker sends its whole vector to every other: (n - 1)k."""
    return (n - 1) * k


# ---------------------------------------------------------------------------------------------
# The same ring across real processes, connected by TCP sockets on 127.0.0.1.


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        part = sock.recv(min(size - len(data), 1 << 20))
        if not part:
            raise ConnectionError("the left neighbour closed the connection")
        data += part
    return bytes(data)


def _ring_worker(rank: int, n: int, array: np.ndarray, ports_q, addr_q, result_q) -> None:
    """One worker process: listen, connect to its right neighbour, run both phases over sockets."""
    try:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        ports_q.put((rank, listener.getsockname()[1]))
        ports = addr_q.get(timeout=60)
        right = socket.create_connection(("127.0.0.1", ports[(rank + 1) % n]), timeout=60)
        left, _ = listener.accept()
        for s in (left, right):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = array.reshape(-1).copy()
        bounds = np.cumsum([0] + chunk_sizes(buf.size, n))
        payload_sent = payload_received = header_bytes = 0
        start = time.perf_counter()
        for phase in PHASES:
            for s in range(n - 1):
                c_out = (rank - s) % n if phase == "scatter-reduce" else (rank + 1 - s) % n
                c_in = (c_out - 1) % n  # what the left neighbour sends at the same step
                out = buf[bounds[c_out] : bounds[c_out + 1]].tobytes()
                sender = threading.Thread(target=right.sendall, args=(HEADER.pack(len(out)) + out,))
                sender.start()
                (size,) = HEADER.unpack(_recv_exact(left, HEADER.size))
                data = np.frombuffer(_recv_exact(left, size), dtype=buf.dtype)
                sender.join()
                if phase == "scatter-reduce":
                    buf[bounds[c_in] : bounds[c_in + 1]] += data
                else:
                    buf[bounds[c_in] : bounds[c_in + 1]] = data
                payload_sent += len(out)
                payload_received += size
                header_bytes += HEADER.size
        seconds = time.perf_counter() - start
        right.close()
        left.close()
        listener.close()
        result_q.put((rank, None, buf, payload_sent, payload_received, header_bytes, seconds))
    except Exception as exc:  # report, never hang the parent
        result_q.put((rank, f"{type(exc).__name__}: {exc}", None, 0, 0, 0, 0.0))


@dataclass
class ProcessRingResult:
    """Outputs and measured bytes of a ring allreduce run across real processes."""

    outputs: list[np.ndarray]
    payload_sent: list[int]
    payload_received: list[int]
    header_bytes: list[int]
    seconds: list[float]


def ring_allreduce_processes(arrays: Sequence[np.ndarray], timeout: float = 60.0) -> ProcessRingResult:
    """Run the ring allreduce with one OS process per worker over TCP on 127.0.0.1; return outputs and bytes."""
    flat = _check_inputs(arrays)
    shape, n = np.asarray(arrays[0]).shape, len(flat)
    if n == 1:
        return ProcessRingResult([flat[0].copy().reshape(shape)], [0], [0], [0], [0.0])
    ctx = mp.get_context("spawn")  # fresh interpreters: safe with threads and TensorFlow in the parent
    ports_q, result_q = ctx.Queue(), ctx.Queue()
    addr_qs = [ctx.Queue() for _ in range(n)]
    procs = [
        ctx.Process(target=_ring_worker, args=(r, n, flat[r], ports_q, addr_qs[r], result_q), daemon=True)
        for r in range(n)
    ]
    deadline = time.monotonic() + timeout
    results: dict[int, tuple] = {}
    try:
        for p in procs:
            p.start()
        ports = {}
        while len(ports) < n:
            rank, port = ports_q.get(timeout=max(0.1, deadline - time.monotonic()))
            ports[rank] = port
        for q in addr_qs:
            q.put([ports[r] for r in range(n)])
        while len(results) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = sorted(set(range(n)) - set(results))
                raise TimeoutError(f"ring workers {missing} did not finish within {timeout:g} s; all were stopped")
            try:
                item = result_q.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if r not in results and p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(
                        f"ring worker {dead[0]} died (exit code {procs[dead[0]].exitcode}); all were stopped"
                    ) from None
                continue
            if item[1] is not None:
                raise RuntimeError(f"ring worker {item[0]} failed: {item[1]}; all were stopped")
            results[item[0]] = item
    except queue.Empty as exc:
        raise TimeoutError(f"the ring workers did not start within {timeout:g} s; all were stopped") from exc
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        for q in (ports_q, result_q, *addr_qs):
            q.close()
            q.cancel_join_thread()
    ordered = [results[r] for r in range(n)]
    return ProcessRingResult(
        outputs=[o[2].reshape(shape) for o in ordered],
        payload_sent=[o[3] for o in ordered],
        payload_received=[o[4] for o in ordered],
        header_bytes=[o[5] for o in ordered],
        seconds=[o[6] for o in ordered],
    )
