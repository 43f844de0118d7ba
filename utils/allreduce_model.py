"""The cost of an allreduce, from one ring of processes to a cluster of GPU servers: the course's one cost model.

For N workers and a buffer of b bytes, the ring (reduce-scatter, then allgather) takes
(Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009)

    t(N, b) = overhead + 2(N-1) alpha + 2(N-1)/N * b / B + (N-1)/N * b * gamma

with alpha the latency of one ring step, B the bandwidth of one link, gamma the seconds to add one byte
(the reduction; on a GPU it is nearly free, on a CPU it is not) and `overhead` a framework's own cost per
call (Horovod's negotiation and the wait for its background cycle). For a fixed N the model is a line in
b: an intercept `overhead + 2(N-1) alpha` and a slope `(N-1)/N * (2/B + gamma)`. Times of allreduces
alone cannot tell B from gamma (both scale with b(N-1)/N): gamma is measured on its own, by timing an
addition, and the link bandwidth follows from the slope.

On a CPU the slope is smaller while a message's pieces fit in the core's caches: the measured line bends
where they outgrow them. `fit_line` then fits two regimes joined at a bend.

A GPU cluster has two levels: G GPUs inside a server joined by NVLink/NVSwitch or PCIe, and M servers joined by
a network that all G GPUs of a server share (`Topology`). `allreduce_seconds` prices NCCL's two algorithms on
it: the ring through all G*M GPUs, whose every step lasts as long as its slowest hop, and the double binary
tree, whose latency grows with log2(M) instead of N. `step_efficiency` sets an allreduce beside a training
step's computation, with the part that can hide behind the backward pass: the optimistic bound, where the whole
allreduce may start with the backward pass. `overlap_step` is the course's one overlap model (the lab's and the
published clusters'): each layer's gradient ready in backprop order, fused and cycled as the library does, sent FIFO;
`compare_published` and `tally` hold it against published results (lesson 03).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def ring_seconds(n, nbytes, alpha: float, bandwidth: float, gamma: float = 0.0, overhead: float = 0.0) -> np.ndarray:
    """Thakur et al.'s ring allreduce time: overhead + 2(n-1)alpha + 2(n-1)/n b/bandwidth + (n-1)/n b gamma."""
    n, b = np.asarray(n, dtype=float), np.asarray(nbytes, dtype=float)
    if np.any(n < 1) or np.any(np.asarray(bandwidth) <= 0):
        raise ValueError(f"n must be at least 1 and the bandwidth positive, got n={n}, bandwidth={bandwidth}")
    return overhead + 2 * (n - 1) * alpha + (n - 1) / n * b * (2 / bandwidth + gamma)


@dataclass(frozen=True)
class LineFit:
    """t(b) = intercept + slope * b, with a second slope above `bend` bytes (continuous there) if bend is set."""

    intercept: float  # seconds: overhead + 2(N-1) alpha
    slope: float  # seconds per byte (below the bend)
    bend: float | None = None  # bytes where the slope changes; None: one regime
    slope_above: float | None = None  # seconds per byte above the bend

    def predict(self, nbytes) -> np.ndarray:
        """Predicted seconds for messages of `nbytes` bytes."""
        b = np.asarray(nbytes, dtype=float)
        t = self.intercept + self.slope * b
        if self.bend is not None:
            t = t + (self.slope_above - self.slope) * np.maximum(b - self.bend, 0.0)
        return t

    def relative_errors(self, nbytes, seconds) -> np.ndarray:
        """(predicted - measured) / measured for each measurement."""
        t = np.asarray(seconds, dtype=float)
        return (self.predict(nbytes) - t) / t


def _solve(columns: list[np.ndarray], t: np.ndarray, iterations: int = 200) -> np.ndarray:
    """Coefficients that minimise the largest relative error (Lawson's iteratively reweighted least squares)."""
    design = np.stack(columns, axis=1) / t[:, None]  # each row divided by t: relative residuals
    weights = np.full(t.size, 1.0 / t.size)
    for _ in range(iterations):
        root = np.sqrt(weights)
        coef, *_ = np.linalg.lstsq(design * root[:, None], root, rcond=None)
        residual = np.abs(design @ coef - 1.0)
        if residual.max() < 1e-12:
            break
        weights = weights * (residual + 1e-15)  # the worst-fitted sizes weigh more in the next round
        weights /= weights.sum()
    return coef


def _check(nbytes, seconds) -> tuple[np.ndarray, np.ndarray]:
    b, t = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if b.shape != t.shape or b.ndim != 1 or b.size < 2:
        raise ValueError("give at least two (bytes, seconds) measurements as two sequences of equal length")
    if np.any(t <= 0) or np.any(b < 0):
        raise ValueError("times must be positive and sizes non-negative")
    order = np.argsort(b)
    return b[order], t[order]


def fit_line(nbytes, seconds, goal: float | None = None) -> LineFit:
    """Fit t = intercept + slope*b, minimising the largest relative error; beyond `goal`, fit two regimes.

    The two-regime fit joins two lines at a bend placed at a measured size (at least two sizes at or
    below it, one above) or midway (geometrically) between two, the one with the smallest worst error.
    """
    b, t = _check(nbytes, seconds)
    intercept, slope = _solve([np.ones_like(b), b], t)
    if slope <= 0:
        raise ValueError("the measured times do not grow with size: no bandwidth can be fitted")
    one = LineFit(max(float(intercept), 0.0), float(slope))
    worst = float(np.max(np.abs(one.relative_errors(b, t))))
    if goal is None or worst <= goal or b.size < 4:
        return one
    best, best_worst = one, worst
    # Candidate bends: every measured size with two sizes at or below it and one above, and the geometric
    # midpoints between neighbouring sizes (a cache bend rarely falls on a power of 4).
    sizes = np.unique(b)
    mids = np.sqrt(sizes[1:-1] * sizes[2:]) if sizes.size > 3 else np.array([])
    for bend in np.unique(np.concatenate([sizes[1:-1], mids])):
        c0, c1, c2 = _solve([np.ones_like(b), b, np.maximum(b - bend, 0.0)], t)
        if c1 <= 0 or c1 + c2 <= 0:
            continue  # a regime whose time falls with size is no bandwidth
        fit = LineFit(max(float(c0), 0.0), float(c1), float(bend), float(c1 + c2))
        err = float(np.max(np.abs(fit.relative_errors(b, t))))
        if err < best_worst:
            best, best_worst = fit, err
    return best


def implied_bandwidth(slope: float, n: int, gamma: float) -> float:
    """The link bandwidth B (bytes/s) that a fitted slope implies: slope = (n-1)/n (2/B + gamma)."""
    if n < 2:
        raise ValueError(f"one worker sends nothing: the slope says nothing about a link (n={n})")
    per_byte = slope * n / (n - 1) - gamma  # = 2 / B
    if per_byte <= 0:
        raise ValueError(
            f"the reduction alone (gamma = {gamma:.3g} s/byte) takes longer than the measured slope allows: "
            "measure gamma and the allreduce on the same machine, under the same load"
        )
    return 2 / per_byte


@dataclass(frozen=True)
class RingFit:
    """The model fitted across several N: per-call overhead, per-step alpha, link bandwidth, given gamma."""

    overhead: float
    alpha: float
    bandwidth: float
    gamma: float

    def predict(self, n, nbytes) -> np.ndarray:
        """Predicted seconds of an allreduce of `nbytes` bytes over `n` workers."""
        return ring_seconds(n, nbytes, self.alpha, self.bandwidth, self.gamma, self.overhead)


def fit_ring(n: Sequence[int], nbytes, seconds, gamma: float, minimax: bool = True) -> RingFit:
    """Fit overhead, alpha and B of `ring_seconds` to times measured at several N (gamma measured apart), minimising
    the largest relative error (or, with `minimax=False`, the sum of squared relative errors with overhead, alpha
    and 1/B kept at zero or above: with few sizes a free fit can trade a negative overhead for a larger alpha)."""
    n_, b, t = (np.asarray(v, dtype=float) for v in (n, nbytes, seconds))
    if not (n_.shape == b.shape == t.shape) or len(set(n_.tolist())) < 2:
        raise ValueError("give (n, bytes, seconds) rows of equal length for at least two values of n")
    if np.any(t <= 0) or np.any(n_ < 2):
        raise ValueError("times must be positive and every n at least 2")
    target = t - (n_ - 1) / n_ * b * gamma  # what is left for the links and latencies
    if np.any(target <= 0):
        raise ValueError("gamma is larger than the measured times allow: measure it on the same machine")
    columns = [np.ones_like(b), 2 * (n_ - 1), 2 * (n_ - 1) / n_ * b]
    if minimax:
        c0, c1, c2 = _solve(columns, target)
    else:  # least squares of the relative errors, none of the three costs below zero
        from scipy.optimize import lsq_linear

        design = np.stack(columns, axis=1) / target[:, None]
        c0, c1, c2 = lsq_linear(design, np.ones_like(target), bounds=(0.0, np.inf)).x
    if c2 <= 0:
        raise ValueError("the times do not grow with size: no bandwidth can be fitted")
    return RingFit(float(c0), float(c1), 1 / float(c2), gamma)


def measure_gamma(nbytes: int, repeats: int = 20) -> float:
    """Seconds per byte to add one float32 buffer of `nbytes` bytes into another on this core (best of repeats)."""
    if nbytes < 4 or repeats < 1:
        raise ValueError(f"nbytes must be at least 4 and repeats at least 1, got {nbytes}, {repeats}")
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.ones_like(a)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        np.add(a, b, out=a)
        best = min(best, time.perf_counter() - start)
    return best / a.nbytes


@dataclass(frozen=True)
class LinkFit:
    """The ring model fitted to allreduces over links of one set rate: the fit, and how it compares."""

    link: str
    set_bytes_per_s: float  # NaN on loopback, where no rate was set
    fit: RingFit
    worst_error: float  # largest |predicted / measured - 1| over the rows fitted

    @property
    def bandwidth_ratio(self) -> float:
        """Fitted link bandwidth over the set one (NaN on loopback)."""
        return self.fit.bandwidth / self.set_bytes_per_s


def fit_links(rows, gamma: float, min_bytes: int = 1 << 20) -> list[LinkFit]:
    """One `fit_ring` per link rate in measurement rows (utils.bench.measure_allreduce's, with `link` and
    `link_bps`), on the best times of messages of at least `min_bytes` bytes, by least squares of the relative
    errors (one call slowed by another program does not pull the fitted bandwidth as a minimax fit would)."""
    import pandas as pd

    df = pd.DataFrame(rows)
    missing = {"np", "bytes", "best_seconds", "link", "link_bps"} - set(df.columns)
    if missing:
        raise ValueError(f"rows lack the columns {sorted(missing)}: measure them with utils.bench.measure_allreduce")
    out = []
    for link, group in df[df.bytes >= min_bytes].groupby("link", sort=False):
        fit = fit_ring(group.np, group.bytes, group.best_seconds, gamma=gamma, minimax=False)
        worst = float(np.max(np.abs(fit.predict(group.np, group.bytes) / group.best_seconds - 1)))
        out.append(LinkFit(str(link), float(group.link_bps.iloc[0]) / 8, fit, worst))
    return out


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


# --- Two levels: GPUs inside a server, servers on a network -----------------------------------------------------


@dataclass(frozen=True)
class Link:
    """One level's link: bytes per second in each direction, and the latency of one message (seconds)."""

    bytes_per_s: float
    latency: float = 0.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.bytes_per_s) and self.bytes_per_s > 0):
            raise ValueError(
                f"a link's bandwidth must be a positive number of bytes per second, got {self.bytes_per_s}"
            )
        if not (np.isfinite(self.latency) and self.latency >= 0):
            raise ValueError(f"a link's latency is a time in seconds, at least 0; got {self.latency}")


#: NCCL's algorithms as `allreduce_seconds` prices them.
ALGORITHMS = ("ring", "tree")


@dataclass(frozen=True)
class Topology:
    """`servers` servers of `gpus` GPUs: `inside` is one GPU's link to the others of its server (NVLink, PCIe),
    `network` one server's link to the others, shared by all its GPUs (its network card(s), EFA or ENA)."""

    gpus: int
    servers: int
    inside: Link
    network: Link

    def __post_init__(self) -> None:
        for name in ("gpus", "servers"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and v >= 1):
                raise ValueError(f"{name} must be a whole number of at least 1, got {v!r}")

    @property
    def n(self) -> int:
        """All the GPUs: one rank each."""
        return int(self.gpus * self.servers)

    @property
    def ring_bandwidth(self) -> float:
        """Bytes/s of the ring's slowest hop: a GPU's link inside, or a server's network (one ring hop leaves each
        server per ring; NCCL runs several rings, its channels, whose number it picks from its topology search, not
        from the count of network cards; together they share the server's network)."""
        rates = ([self.inside.bytes_per_s] if self.gpus > 1 else []) + (
            [self.network.bytes_per_s] if self.servers > 1 else []
        )
        return min(rates) if rates else float("inf")

    @property
    def slowest_latency(self) -> float:
        """Seconds of the slowest hop's latency: the network's once a ring leaves a server (what every step of a
        ring that is not pipelined waits for, as MPI's does)."""
        return self.network.latency if self.servers > 1 else self.inside.latency


#: NCCL's own latencies for large messages (its "Simple" protocol), in seconds: a fixed cost per call and one per
#: ring step on each kind of link (NVIDIA/nccl src/graph/tuning.cc, baseLat and hwLat tables, NCCL 2.30.7 at
#: 5067397c, read 2026-11-27: base 8.4 us; ring steps 3.4 us over NVLink, 5.7 us over PCIe, 14 us over the network).
NCCL_LATENCY = {"base": 8.4e-6, "NVLink": 3.4e-6, "PCIe": 5.7e-6, "network": 14e-6}
#: The share of a link's bandwidth NCCL's model gives its tree (busBw * .92 for allreduce, same file and commit).
TREE_EFFICIENCY = 0.92


def allreduce_seconds(topology: Topology, nbytes, algorithm: str = "ring", overhead: float = 0.0) -> np.ndarray:
    """Seconds to allreduce `nbytes` over every GPU of `topology` with NCCL's `algorithm` ("ring" or "tree"),
    `overhead` seconds a call on top (NCCL's base latency, or Horovod's negotiation). With N = G*M GPUs:

    ring: 2(N-1) steps, 2(M-1) of them crossing the network (a_network each) and the rest inside a server
          (a_inside), and 2(N-1)/N of the buffer through the slowest hop (B_ring: the smaller of a GPU's link inside
          and a server's network): t = 2(N-M) a_inside + 2(M-1) a_network + 2(N-1)/N b / B_ring.
    tree: a chain through each server's G GPUs and NCCL's double binary tree across the M servers, reduce then
          broadcast, pipelined, each tree carrying half the buffer. A GPU of the chain sends 2b in all; a server
          sends 2b over the network when M > 2 (interior in one tree, a leaf in the other) and b when M = 2 (each
          server the root of one tree). Latency 2((G-1) a_inside + floor(log2 M) a_network); NCCL gives the tree
          92 % of a link's bandwidth (TREE_EFFICIENCY).
    The latency terms are NCCL's ring latencies (src/graph/tuning.cc), used for the tree too (NCCL's own tree values
    differ by under 2 us a step); the tree's 92 % is kept, NCCL's protocols, per-channel caps and other algorithms
    (NVLS, CollNet, PAT) are left out.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}: choose one of {ALGORITHMS}")
    b = np.asarray(nbytes, dtype=float)
    if np.any(b < 0):
        raise ValueError(f"nbytes must not be negative, got {nbytes}")
    t, n, m = topology, topology.n, topology.servers
    if n == 1:
        return np.zeros_like(b) + overhead
    if algorithm == "ring":
        latency = 2 * (n - m) * t.inside.latency + 2 * (m - 1) * t.network.latency
        return overhead + latency + 2 * (n - 1) / n * b / t.ring_bandwidth
    depth = int(np.floor(np.log2(m)))
    latency = 2 * ((t.gpus - 1) * t.inside.latency + depth * t.network.latency)
    inside = 2 * b / t.inside.bytes_per_s if t.gpus > 1 else 0.0
    network = (2 if m > 2 else 1) * b / t.network.bytes_per_s if m > 1 else 0.0
    return overhead + latency + np.maximum(inside, network) / TREE_EFFICIENCY


def fastest_algorithm(topology: Topology, nbytes: float) -> tuple[str, float]:
    """The algorithm of ALGORITHMS that allreduces `nbytes` soonest on `topology`, and its seconds (NCCL chooses
    the same way, from a model of the same kind: its src/graph/tuning.cc)."""
    times = {a: float(allreduce_seconds(topology, nbytes, a)) for a in ALGORITHMS}
    best = min(times, key=times.get)
    return best, times[best]


def bus_bandwidth(nbytes, seconds, n: int) -> np.ndarray:
    """nccl-tests' bus bandwidth (bytes/s): the algorithm bandwidth b/t times 2(n-1)/n, the share of the buffer each
    link must carry in an allreduce, so that it compares with a link's own rate whatever n is."""
    if n < 2:
        raise ValueError(f"a bus bandwidth needs at least 2 ranks, got n={n}")
    t = np.asarray(seconds, dtype=float)
    if np.any(t <= 0):
        raise ValueError("times must be positive")
    return np.asarray(nbytes, dtype=float) / t * 2 * (n - 1) / n


#: The backward pass's share of a training step's computation: about 2/3, since a step costs about 6 operations
#: per parameter and example, 2 forward and 4 backward (Kaplan et al. 2020, "Scaling Laws for Neural Language
#: Models", section 2.1). Gradients can travel while the backward pass still runs, so that much can overlap.
BACKWARD_SHARE = 2 / 3


def step_efficiency(compute_seconds: float, allreduce: float, overlap: float = BACKWARD_SHARE, overhead: float = 0.0):
    """The optimistic bound of the efficiency of a synchronous step, each GPU keeping its batch: its computation over
    the step, where the whole allreduce may run during the last `overlap` share of the computation (the backward pass;
    it predicts exactly 1 whenever the allreduce is shorter than that share) and `overhead`
    (seconds) is paid every step on top: c / ((1 - overlap) c + max(overlap c, allreduce) + overhead)."""
    if not compute_seconds > 0:
        raise ValueError(f"compute_seconds must be positive, got {compute_seconds}")
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap is a share of the step's computation, between 0 and 1; got {overlap}")
    comm = np.asarray(allreduce, dtype=float)
    if np.any(comm < 0) or overhead < 0:
        raise ValueError("the allreduce and the overhead are times, at least 0")
    step = (1 - overlap) * compute_seconds + np.maximum(overlap * compute_seconds, comm) + overhead
    return compute_seconds / step


def predicted_efficiency(
    one_rank_step: float,
    n: int,
    compute_step: float,
    grad_bytes: float,
    link_bytes_per_s,
    fixed_seconds: float = 0.0,
    step_latency: float = 0.0,
    overlap: float = 0.0,
    layer_bytes: Sequence[float] | None = None,
    overhead_seconds: float = 0.0,
) -> np.ndarray:
    """Scaling efficiency T(N) predicts when every rank keeps the one-rank batch: one rank's step over the N-rank
    step. That step is the computation (`compute_step`, measured with N processes busy) and the allreduce (its
    fixed cost plus the ring's traffic through links of `link_bytes_per_s`), of which the allreduce may run
    during the last `overlap` share of the computation (0: one after the other; BACKWARD_SHARE: during the
    backward pass, as Horovod's bridge hands each gradient over when it is ready).

    Without `layer_bytes` the whole allreduce may start when that share begins (the most it can hide). With
    `layer_bytes`, the gradient bytes of each layer in the order the backward pass produces them (the last layer
    first), each layer's gradient is ready only once the backward pass has computed it (the pass's time shared
    among the layers in proportion to their bytes: a dense layer's backward work is proportional to its
    weights) and the link sends them one after the other: the step ends when the last one has crossed.

    `overhead_seconds` is added to every step: what synchronous training costs a step beyond the computation
    where the link costs nothing (measured on loopback: N ranks' step minus N independent workers' step; it holds
    the allreduce's fixed cost and its copies, so pass fixed_seconds=0 with it)."""
    if overhead_seconds < 0:
        raise ValueError(f"overhead_seconds is a time, at least 0; got {overhead_seconds}")
    rates = np.asarray(link_bytes_per_s, dtype=float)
    if one_rank_step <= 0 or compute_step <= 0 or grad_bytes < 0 or n < 2 or np.any(rates <= 0):
        raise ValueError("steps and rates must be positive, grad_bytes not negative, and n at least 2")
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap is a share of the step's computation, between 0 and 1; got {overlap}")
    if layer_bytes is None:
        comm = fixed_seconds + ring_seconds(n, grad_bytes, step_latency, rates)
        return one_rank_step / compute_step * step_efficiency(compute_step, comm, overlap, overhead_seconds)
    sizes = np.asarray(layer_bytes, dtype=float)
    if sizes.size == 0 or np.any(sizes < 0) or not np.isclose(sizes.sum(), grad_bytes, rtol=0.01):
        raise ValueError(
            f"layer_bytes must be the layers' gradient bytes, adding up to grad_bytes ({grad_bytes:,.0f}); "
            f"got {sizes.size} layers adding up to {sizes.sum():,.0f}"
        )
    backward_start = (1 - overlap) * compute_step
    ready = backward_start + overlap * compute_step * np.cumsum(sizes) / sizes.sum()
    done = np.zeros_like(rates)
    for at, size in zip(ready, sizes):  # first in, first out through the link
        done = np.maximum(done, at) + ring_seconds(n, size, 0.0, rates)
    step = np.maximum(compute_step, done + fixed_seconds + 2 * (n - 1) * step_latency)
    return one_rank_step / (step + overhead_seconds)


def binding_rate(
    n: int, grad_bytes: float, compute_step: float, overlap: float = 1.0, fixed_seconds: float = 0.0
) -> float:
    """The link rate (bytes/s) below which a step's ring allreduce (its fixed cost included) outlasts the `overlap`
    share of the computation it can hide behind (overlap 1: the whole computation), and so lengthens the step."""
    if n < 2 or compute_step <= 0 or not 0 < overlap <= 1:
        raise ValueError("n must be at least 2, compute_step positive and overlap in (0, 1]")
    room = overlap * compute_step - fixed_seconds
    if room <= 0:
        return float("inf")  # the fixed cost alone outlasts the overlap: every link binds
    return 2 * (n - 1) / n * grad_bytes / room


# --- Today's instances and published clusters, from the course's data files -------------------------------------


def instances():
    """data/gpu_instances.csv (SageMaker GPU training instances, each fact with its source), by instance type."""
    import pandas as pd

    from utils.paths import DATA

    return pd.read_csv(DATA / "gpu_instances.csv").set_index("instance_type")


def _inside_latency(intra_link: str) -> float:
    return NCCL_LATENCY["PCIe"] if str(intra_link).strip().lower() == "pcie" else NCCL_LATENCY["NVLink"]


def topology_of(instance_type: str, count: int) -> Topology:
    """`count` instances of `instance_type` (from data/gpu_instances.csv) as a Topology with NCCL's latencies."""
    table = instances()
    if instance_type not in table.index:
        raise ValueError(
            f"unknown instance type {instance_type!r}: data/gpu_instances.csv knows {', '.join(table.index)}"
        )
    row = table.loc[instance_type]
    network = Link(float(row.network_gbps) * 1e9 / 8, NCCL_LATENCY["network"])
    gpus = int(row.gpus)
    if gpus > 1 and not float(row.intra_gbytes_per_s) > 0:
        raise ValueError(
            f"data/gpu_instances.csv gives no bandwidth between the GPUs of {instance_type} (no source found for it): "
            "choose another instance type, or build a Topology with a link you can source"
        )
    inside = network if gpus == 1 else Link(float(row.intra_gbytes_per_s) * 1e9, _inside_latency(row.intra_link))
    return Topology(gpus, int(count), inside, network)


#: GPUs whose NVSwitch can add (NVLink SHARP; NCCL's NVLS algorithms: Hopper and later, src/graph/tuning.cc).
SWITCH_ADDS = ("H100", "H200", "B200", "GH200", "GB200")


def check_published(cases, overlap: float = BACKWARD_SHARE, gradient_bytes_per_parameter: int = 4):
    """The optimistic bound (whole-buffer overlap, no framework cost) beside each published case; lesson 03 uses
    `compare_published`, which predicts with the per-layer model and keeps this bound as a column. The model beside
    each published case of data/published_scaling.csv: for a scaling measurement, the efficiency
    it predicts from the case's own inputs (parameters, batch and one-GPU throughput, GPUs per server, links); for a
    nccl-tests measurement, the bus bandwidth. Nothing is fitted to the published answer.

    Column `tests`: "communication" where the prediction rests on the allreduce (a bus bandwidth, or an allreduce
    that takes at least half the backward pass it hides behind); "bound only" where the model predicts no loss
    from communication at all, so that its 1.0 is an upper bound and the case says nothing of the allreduce."""
    import pandas as pd

    out = []
    for _, c in cases.iterrows():
        scaling = pd.notna(c.published_efficiency)
        needs = ["gpus_per_server", "servers"] + (
            ["parameters", "batch_per_gpu", "one_gpu_images_per_s"] if scaling else ["message_bytes"]
        )
        missing = [k for k in needs if pd.isna(c[k])]
        if missing:  # the source does not give every input: not checked, and said so
            out.append(
                {
                    "case": c.case,
                    "measure": "scaling efficiency" if scaling else "bus bandwidth (GB/s)",
                    "published": float(c.published_efficiency if scaling else c.published_busbw_gbytes_per_s),
                    "not checked": "the source gives no " + ", ".join(missing),
                }
            )
            continue
        topo = _case_topology(c)
        row = {"case": c.case, "GPUs": topo.n}
        if scaling:
            grad = float(c.parameters) * gradient_bytes_per_parameter
            algorithm, comm = fastest_algorithm(topo, grad)
            compute = float(c.batch_per_gpu) / float(c.one_gpu_images_per_s)
            predicted = float(step_efficiency(compute, comm + NCCL_LATENCY["base"], overlap))
            hidden = comm / (overlap * compute)
            row |= {
                "measure": "scaling efficiency",
                "published": float(c.published_efficiency),
                "predicted": predicted,
                "error": round(predicted - float(c.published_efficiency), 6),
                "allreduce (ms)": 1e3 * comm,
                "compute (ms)": 1e3 * compute,
                "allreduce / backward": hidden,
                "algorithm": algorithm,
                "tests": "communication" if hidden >= 0.5 else "bound only",
            }
        else:
            size = float(c.message_bytes)
            algorithm, t = fastest_algorithm(topo, size)
            predicted = float(bus_bandwidth(size, t + NCCL_LATENCY["base"], topo.n)) / 1e9
            row |= {
                "measure": "bus bandwidth (GB/s)",
                "published": float(c.published_busbw_gbytes_per_s),
                "predicted": predicted,
                "error": round(predicted / float(c.published_busbw_gbytes_per_s) - 1, 6),
                "algorithm": algorithm,
                "tests": "communication",
            }
        out.append(row)
    return pd.DataFrame(out)


def _case_topology(c) -> Topology:
    """A published case's cluster: where its source gives no link inside a server, the network binds (a stand-in
    link as fast as the network, with PCIe's latency)."""
    import pandas as pd

    gpus, servers = int(c.gpus_per_server), int(c.servers)
    net = Link(float(c.network_gbps) * 1e9 / 8 if c.network_gbps > 0 else 1.0, NCCL_LATENCY["network"])
    if gpus == 1 or pd.isna(c.intra_gbytes_per_s):
        inside = Link(net.bytes_per_s, NCCL_LATENCY["PCIe"])
    else:
        inside = Link(float(c.intra_gbytes_per_s) * 1e9, _inside_latency(c.intra_link))
    return Topology(gpus, servers, inside, net)


def why_missed(
    checked, case, cases=None, overlap: float = BACKWARD_SHARE, gradient_bytes_per_parameter: int = 4
) -> str:
    """One generated sentence on a published case outside the goal: which of the model's assumptions its own figures
    contradict (`checked`: a row of check_published; `case`: the same case's row of data/published_scaling.csv;
    `cases`: the whole file, to name the source's other tables of the same runs)."""
    if checked.measure == "scaling efficiency":
        published, compute, comm = checked.published, checked["compute (ms)"], checked["allreduce (ms)"]
        if published > 1:
            same = []
            if cases is not None:
                keys = ["model", "gpu", "precision", "gpus_per_server", "servers"]
                twins = cases[(cases[keys] == case[keys]).all(axis=1) & (cases.case != case.case)]
                same = [f"{t.case} ({t.published_efficiency:.3f})" for _, t in twins.iterrows()]
            return (
                f"{checked.case}: the published efficiency is {published:.3f}, above 1: the multi-GPU run beat "
                f"{int(checked.GPUs)} one-GPU runs, which no cost of communication can explain"
                + (f"; the same runs in another of the source's tables: {', '.join(same)}" if same else "")
            )
        hidden = comm / (overlap * compute)
        if hidden < 0.5:
            return (
                f"{checked.case}: the allreduce ({comm:.1f} ms) takes {hidden:.0%} of the backward pass it hides behind, so "
                f"communication cannot explain the {100 * (checked.predicted - published):.0f} points lost: the model "
                "has no other cost of scaling (the GPUs of one server share its CPUs, memory and host links, and "
                "whatever feeds them the data)"
            )
        topo = _case_topology(case)
        binding = (
            "network" if topo.servers > 1 and topo.network.bytes_per_s <= topo.inside.bytes_per_s else "link inside"
        )
        step = compute / published  # the step the published efficiency implies, in ms
        room = step - (1 - overlap) * compute  # what that step leaves for the allreduce once it runs beside backprop
        grad = float(case.parameters) * gradient_bytes_per_parameter
        rate = 2 * (checked.GPUs - 1) / checked.GPUs * grad / (room / 1e3)
        relation = "outlasts" if hidden > 1 else f"takes {hidden:.0%} of"
        return (
            f"{checked.case}: the allreduce ({comm:.0f} ms) {relation} the backward pass ({overlap * compute:.0f} ms), so "
            f"the step rests on the rate the ring really gets; the published {published:.2f} means a step of "
            f"{step:.0f} ms and an allreduce of {room:.0f} ms, a bus bandwidth of {8 * rate / 1e9:.1f} Gbit/s, "
            f"{rate / topo.ring_bandwidth:.0%} of the {8 * topo.ring_bandwidth / 1e9:g} Gbit/s {binding} the model "
            f"gives it in full (the step from the inputs the row names: {case.gpu}, batch {case.batch_per_gpu:g})"
        )
    return why_above_ceiling(checked, case)


def why_above_ceiling(checked, case) -> str:
    """A sentence on a bus bandwidth against the most any of the model's algorithms could reach on that cluster."""
    topo = _case_topology(case)
    size = float(case.message_bytes)
    ceiling = max(float(bus_bandwidth(size, allreduce_seconds(topo, size, a), topo.n)) for a in ALGORITHMS) / 1e9
    if checked.published <= ceiling:
        return (
            f"{checked.case}: {checked.published:.0f} GB/s published against {checked.predicted:.0f} GB/s predicted: "
            f"below what the model's faster algorithm reaches, so NCCL got less of the links than the model gives it"
        )
    adds = any(g in str(case.gpu) for g in SWITCH_ADDS)
    return (
        f"{checked.case}: {checked.published:.0f} GB/s is more than the model's ring or tree can reach on this cluster "
        f"({ceiling:.0f} GB/s at most), so NCCL ran something the model does not have"
        + (
            f"; on {case.gpu} servers the NVSwitch itself can add (NVLink SHARP, NCCL's NVLS algorithms), so a GPU "
            "sends its buffer once instead of twice: the published output does not say which algorithm ran"
            if adds
            else "; the published output does not say which algorithm ran"
        )
    )


# --- One overlap model: each layer's gradient, fused and sent as the library does -----------------------------------

#: The Keras applications whose layers data/keras_layer_gradients.csv holds (the published cases' models).
KERAS_MODELS = {
    "VGG-16": "VGG16",
    "Inception V3": "InceptionV3",
    "ResNet-50 v1.5": "ResNet50",
    "ResNet-101": "ResNet101",
}


def layer_table(keras_model, bytes_per_value: int = 4):
    """One row per layer with trainable weights, in forward order: its gradient bytes (trainable weights only:
    BatchNorm's moving statistics get no gradient and are not allreduced) and its forward multiply-adds per example
    (Conv2D: output height x width x kernel height x width x input channels x filters / groups; Dense: inputs x
    units; other layers, such as BatchNormalization's scale and shift, 0: element-wise work, next to nothing)."""
    import pandas as pd

    rows = []
    for layer in keras_model.layers:
        if not layer.trainable_weights:
            continue
        values = sum(int(np.prod(w.shape)) for w in layer.trainable_weights)
        kind, macs = type(layer).__name__, 0
        if kind == "Conv2D":
            out = layer.output.shape  # (batch, height, width, filters)
            kh, kw, cin_per_group, filters = layer.kernel.shape
            macs = int(out[1]) * int(out[2]) * int(kh) * int(kw) * int(cin_per_group) * int(filters)
        elif kind == "Dense":
            fan_in, units = layer.kernel.shape
            macs = int(fan_in) * int(units)
        rows.append({"layer": layer.name, "kind": kind, "gradient_bytes": bytes_per_value * values, "macs": macs})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Fusion:
    """How a library hands gradients to the allreduce: its fusion buffer (bytes; 0: every tensor alone) and its
    background cycle (seconds; 0: a tensor leaves as soon as it is ready and the link is free). `after_ops`: the
    next cycle starts `cycle` after the previous cycle's operations ended (Horovod 0.x: a fixed sleep in its loop)
    rather than `cycle` after the previous cycle started (Horovod since 0.21)."""

    label: str
    fusion_bytes: float
    cycle_seconds: float
    after_ops: bool
    source: str


#: Horovod up to 0.20: a 64 MiB fusion buffer and a 5 ms sleep between cycles (horovod/horovod
#: horovod/common/operations.cc @ 8318a898a2f03fb22664ca8f5353361974f8a693, the commit of the 512-GPU benchmark:
#: `tensor_fusion_threshold = 64 * 1024 * 1024` and `sleep_for(std::chrono::milliseconds(5))` at the top of the
#: background loop, after the previous cycle's allreduces).
HOROVOD_0X = Fusion(
    "Horovod < 0.21",
    64 * 2**20,
    5e-3,
    True,
    "horovod/horovod operations.cc @ 8318a89 (2018-05): 64 MiB fusion buffer, 5 ms sleep a cycle",
)
#: Horovod since 0.21.0: 128 MiB and a 1 ms cycle counted from the previous cycle's start (CHANGELOG v0.21.0, #2468:
#: "Changed default cycle time from 5ms to 1ms and fusion threshold from 64MB to 128MB"; operations.cc @ 2626dc8).
HOROVOD_NOW = Fusion(
    "Horovod >= 0.21",
    128 * 2**20,
    1e-3,
    False,
    "horovod/horovod CHANGELOG v0.21.0 (#2468); operations.cc @ 2626dc8: 128 MiB, 1 ms from the last cycle's start",
)
#: No fusion and no cycle: each gradient allreduced on its own as soon as it is ready (TensorFlow's in-graph
#: `replicated` variables with NCCL, as tf_cnn_benchmarks ran them in 2017: one all-reduce per variable).
UNFUSED = Fusion("one allreduce per gradient", 0, 0.0, False, "no fusion buffer, no background cycle")


@dataclass(frozen=True)
class Packs:
    """How TensorFlow's MultiWorkerMirroredStrategy hands a step's gradients to its collectives: all at once, in the
    order the backward pass computes them (it reverses the list of variables "so that there's better chance that
    values follows the order in which they are calculated"), grouped into packs that each close once they hold more
    than `bytes_per_pack` (0: one pack of every gradient), each pack one allreduce, launched in order. Unlike
    Horovod's cycle (Fusion), the packs are fixed before the step: a pack leaves once its last gradient is ready."""

    label: str
    bytes_per_pack: float
    source: str = (
        "tensorflow/python/distribute/cross_device_ops.py (CollectiveAllReduce: dense_values.reverse(), then "
        "cross_device_utils.group_by_size) and collective_util.py (CommunicationOptions.bytes_per_pack), TF 2.21"
    )


def tf_packs(layer_bytes, bytes_per_pack: float) -> list[list[int]]:
    """The layers (indices into `layer_bytes`, in backward order) of each pack, grouped as TensorFlow's
    cross_device_utils.group_by_size groups them: a new pack starts after one that holds more than `bytes_per_pack`."""
    sizes = [float(b) for b in layer_bytes]
    if bytes_per_pack < 0:
        raise ValueError(f"bytes_per_pack is at least 0 (0: one pack), got {bytes_per_pack}")
    if bytes_per_pack == 0:
        return [list(range(len(sizes)))]
    packs: list[list[int]] = []
    held = 0.0
    for i, size in enumerate(sizes):
        if not packs or held > bytes_per_pack:
            packs.append([])
            held = 0.0
        packs[-1].append(i)
        held += size
    return packs


@dataclass(frozen=True)
class OverlapStep:
    """One synchronous step under the per-layer overlap model."""

    compute: float  # seconds of computation (forward + backward)
    seconds: float  # the whole step: the later of the computation and the last allreduce, plus the overhead
    buffers: tuple  # (start, bytes, seconds) of each allreduce, in the order they crossed the link
    overhead: float  # seconds a step pays on top, whatever the link

    @property
    def efficiency(self) -> float:
        """The computation over the step: 1 where communication and the framework cost nothing."""
        return self.compute / self.seconds

    @property
    def exposed(self) -> float:
        """Seconds of allreduce left after the computation ended (the part the backward pass did not hide)."""
        return self.seconds - self.overhead - self.compute


def overlap_step(
    compute_seconds: float,
    layer_bytes,
    allreduce,
    layer_work=None,
    backward_share: float = BACKWARD_SHARE,
    fusion: Fusion | Packs = UNFUSED,
    overhead_seconds: float = 0.0,
) -> OverlapStep:
    """The per-layer overlap model, the course's one model of a step that overlaps its allreduce with the backward
    pass (the lab's and the published clusters').

    `layer_bytes`: each layer's gradient bytes in the order the backward pass produces them (the last layer first).
    The backward pass is the last `backward_share` of `compute_seconds`; its time is shared among the layers in
    proportion to `layer_work` (their multiply-adds; by default their bytes, which is the same for dense layers), and
    a layer's gradient is ready when its share ends. The library's background cycle (`fusion`) wakes, takes every
    gradient ready by then, packs them in order into buffers of at most `fusion.fusion_bytes` (a larger gradient goes
    alone) and allreduces the buffers one after the other: `allreduce(nbytes)` gives the seconds of one. With
    `fusion` a Packs (TensorFlow's MultiWorkerMirroredStrategy), the packs are fixed (tf_packs) and each is allreduced
    once its last gradient is ready and the one before it is done. The step ends when the computation and the last
    allreduce have both finished; `overhead_seconds` is added (what the framework costs a step beyond that, measured
    where the link costs nothing)."""
    sizes = np.asarray(layer_bytes, dtype=float)
    work = sizes if layer_work is None else np.asarray(layer_work, dtype=float)
    if not compute_seconds > 0 or sizes.size == 0 or np.any(sizes < 0) or work.shape != sizes.shape:
        raise ValueError(
            "give a positive computation time and each layer's gradient bytes (and work, one per layer, if given)"
        )
    if np.any(work < 0) or work.sum() <= 0:
        raise ValueError("the layers' work must be at least 0 and add up to more than 0")
    if not 0 <= backward_share <= 1 or overhead_seconds < 0:
        raise ValueError(f"backward_share lies in [0, 1] and overhead_seconds is at least 0; got {backward_share}")
    start = (1 - backward_share) * compute_seconds
    ready = start + backward_share * compute_seconds * np.cumsum(work) / work.sum()
    if isinstance(fusion, Packs):
        buffers, free = [], 0.0
        for pack in tf_packs(sizes, fusion.bytes_per_pack):
            t, size = max(free, float(ready[pack[-1]])), float(sizes[pack].sum())
            seconds = float(allreduce(size))
            buffers.append((t, size, seconds))
            free = t + seconds
        step = max(compute_seconds, free) + overhead_seconds
        return OverlapStep(float(compute_seconds), float(step), tuple(buffers), float(overhead_seconds))
    cycle, limit = float(fusion.cycle_seconds), float(fusion.fusion_bytes)
    buffers, free, last_wake, i = [], 0.0, 0.0, 0
    while i < sizes.size:
        wake = (free if fusion.after_ops else last_wake) + cycle
        wake = max(wake, free)  # a cycle cannot start while the previous one still runs its allreduces
        if ready[i] > wake:  # nothing ready yet: the thread sleeps whole cycles until something is
            wake += np.ceil((ready[i] - wake) / cycle) * cycle if cycle > 0 else ready[i] - wake
        last_wake, t = wake, wake
        taken = i + int(np.searchsorted(ready[i:], wake, side="right"))
        while i < taken:  # pack the ready gradients, in order, into buffers of at most `limit` bytes
            size, j = sizes[i], i + 1
            while j < taken and size + sizes[j] <= limit:
                size, j = size + sizes[j], j + 1
            seconds = float(allreduce(size))
            buffers.append((t, size, seconds))
            t, i = t + seconds, j
        free = t
    step = max(compute_seconds, free) + overhead_seconds
    return OverlapStep(float(compute_seconds), float(step), tuple(buffers), float(overhead_seconds))


def layer_gradients(model: str):
    """data/keras_layer_gradients.csv for one model, in the order the backward pass produces the gradients (the last
    layer first): columns layer, kind, gradient_bytes, macs."""
    import pandas as pd

    from utils.paths import DATA

    table = pd.read_csv(DATA / "keras_layer_gradients.csv")
    if model not in set(table.model):
        raise ValueError(f"no layer sizes for {model!r}: data/keras_layer_gradients.csv has {sorted(set(table.model))}")
    return table[table.model == model].sort_values("position", ascending=False).reset_index(drop=True)


#: The goal of lesson 03's comparison with published results: efficiency within 10 points, bus bandwidth within 10 %.
GOAL = {"scaling efficiency": 0.10, "bus bandwidth (GB/s)": 0.10}


def _fusion_of(library: str) -> Fusion:
    """The fusion and cycle a published case's library ran with (data/published_scaling.csv, column `library`)."""
    text = str(library)
    if "Horovod" in text:
        return HOROVOD_NOW if ">= 0.21" in text else HOROVOD_0X
    return UNFUSED


def _allowed(case) -> tuple[str, ...]:
    import pandas as pd

    text = "" if pd.isna(case.get("nccl_algorithms")) else str(case.nccl_algorithms)
    allowed = tuple(a for a in ALGORITHMS if a in text)
    return allowed or ALGORITHMS


def _fastest(topology: Topology, nbytes: float, allowed) -> tuple[str, float]:
    times = {a: float(allreduce_seconds(topology, nbytes, a)) for a in allowed}
    best = min(times, key=times.get)
    return best, times[best]


def compare_published(cases, backward_share: float = BACKWARD_SHARE):
    """Each published case of data/published_scaling.csv (superseded rows left out) beside the model, from the case's
    own inputs, nothing fitted to its answer.

    A scaling case is predicted with the per-layer overlap model (`overlap_step`): the layers of the Keras model
    (data/keras_layer_gradients.csv, trainable weights), their gradients ready in backprop order as the pass's time
    is shared by their multiply-adds, fused and cycled as the case's library does (`_fusion_of`), each buffer priced by
    the fastest of the NCCL algorithms the case's NCCL had, with NCCL's base latency. Column `optimistic bound`: the
    old whole-buffer overlap (`step_efficiency`: the whole allreduce may start with the backward pass), the most any
    overlap allows. A nccl-tests case is predicted as a bus bandwidth; its `ceiling` is the most the model's ring or
    tree reach on that cluster.

    Column `tests`: "communication" for a bus bandwidth or an allreduce at least half the backward pass, else "little
    communication" (the prediction then says mostly that communication costs little). Column `class`: "outside the
    model" where the published figure is above the model's ceiling (the optimistic bound
    for a scaling case), then "hit" within GOAL, else "miss"; `counted` marks the one row of each configuration that
    the tally counts."""
    import pandas as pd

    out = []
    for _, c in cases.iterrows():
        if "superseded_by" in c and pd.notna(c.superseded_by) and str(c.superseded_by).strip():
            continue
        scaling = pd.notna(c.published_efficiency)
        measure = "scaling efficiency" if scaling else "bus bandwidth (GB/s)"
        row = {
            "case": c.case,
            "configuration": c.get("configuration", c.case),
            "counted": bool(int(c.get("counted", 1))) if pd.notna(c.get("counted", 1)) else True,
            "source": c.get("source", ""),
            "measure": measure,
            "published": float(c.published_efficiency if scaling else c.published_busbw_gbytes_per_s),
        }
        needs = ["gpus_per_server", "servers"] + (
            ["batch_per_gpu", "one_gpu_images_per_s"] if scaling else ["message_bytes"]
        )
        missing = [k for k in needs if pd.isna(c[k])]
        if scaling and c.model not in KERAS_MODELS:
            missing.append("layer sizes (no Keras model)")
        if missing:  # the source does not give every input: not checked, and said so
            out.append(row | {"class": "not checked", "not checked": "the source gives no " + ", ".join(missing)})
            continue
        topo = _case_topology(c)
        allowed = _allowed(c)
        row["GPUs"] = topo.n
        if scaling:
            layers = layer_gradients(c.model)
            grad = float(layers.gradient_bytes.sum())
            compute = float(c.batch_per_gpu) / float(c.one_gpu_images_per_s)
            algorithm, whole = _fastest(topo, grad, allowed)
            bound = float(step_efficiency(compute, whole + NCCL_LATENCY["base"], backward_share))
            fusion = _fusion_of(c.get("library", ""))
            step = overlap_step(
                compute,
                layers.gradient_bytes,
                lambda b, topo=topo, allowed=allowed: _fastest(topo, b, allowed)[1] + NCCL_LATENCY["base"],
                layers.macs,
                backward_share,
                fusion,
            )
            row |= {
                "predicted": step.efficiency,
                "optimistic bound": bound,
                "ceiling": bound,
                "error": step.efficiency - row["published"],
                "compute (ms)": 1e3 * compute,
                "allreduce (ms)": 1e3 * whole,
                "allreduce / backward": whole / (backward_share * compute),
                "exposed (ms)": 1e3 * step.exposed,
                "buffers": len(step.buffers),
                "algorithm": algorithm,
                "fusion": fusion.label,
            }
        else:
            size = float(c.message_bytes)
            algorithm, t = _fastest(topo, size, allowed)
            predicted = float(bus_bandwidth(size, t + NCCL_LATENCY["base"], topo.n)) / 1e9
            ceiling = (
                max(float(bus_bandwidth(size, allreduce_seconds(topo, size, a), topo.n)) for a in ALGORITHMS) / 1e9
            )
            row |= {
                "predicted": predicted,
                "ceiling": ceiling,
                "error": predicted / row["published"] - 1,
                "algorithm": algorithm,
            }
        ratio = row.get("allreduce / backward", float("inf"))
        row["tests"] = "communication" if ratio >= 0.5 else "little communication"
        above = row["published"] > row["ceiling"] * (1 + 1e-9)
        row["class"] = (
            "outside the model" if above else ("hit" if abs(row["error"]) <= GOAL[measure] + 1e-12 else "miss")
        )
        out.append(row)
    return pd.DataFrame(out)


def tally(compared):
    """One row per configuration (the `counted` row of each), its class: what lesson 03's verdict counts."""
    counted = compared[compared.counted & (compared["class"] != "not checked")]
    if counted.configuration.duplicated().any():
        raise ValueError("a configuration has more than one counted row: mark one row of each as counted")
    return counted.reset_index(drop=True)


def tally_sentence(table) -> str:
    """The verdict, generated from `tally`'s table: hits of the comparable configurations, and those outside."""
    classes = table["class"].value_counts()
    hits, misses, outside = (int(classes.get(k, 0)) for k in ("hit", "miss", "outside the model"))
    comparable = hits + misses
    sources = table[table["class"].isin(["hit", "miss"])].source.nunique()
    share = hits / comparable if comparable else float("nan")
    decided = table[table["class"].isin(["hit", "miss"]) & (table.tests == "communication")]
    return (
        f"{hits} of {comparable} comparable configurations ({share:.0%}, from {sources} sources) are within the goal, "
        f"{misses} missed; {outside} outside the model (above what its algorithms can reach). Of the comparable ones, "
        f"{len(decided)} are decided by communication (a bus bandwidth, or an allreduce at least half the backward "
        f"pass): {int((decided['class'] == 'hit').sum())} of them within the goal; in the other "
        f"{comparable - len(decided)} the model predicts that communication costs little"
    )


def mechanism(row, case=None) -> str:
    """A generated sentence naming the mechanism behind a miss or a case outside the model (a row of
    compare_published; `case`: its row of data/published_scaling.csv, for the GPU and the library)."""
    gpu = "" if case is None else str(case.get("gpu", ""))
    library = "" if case is None else str(case.get("library", ""))
    if row["class"] == "outside the model":
        if row.measure == "bus bandwidth (GB/s)":
            head = (
                f"{row.case}: {row.published:.0f} GB/s is above the {row.ceiling:.0f} GB/s the model's ring or tree can "
                "reach: NCCL ran an algorithm the model does not have"
            )
            if not any(g in gpu for g in SWITCH_ADDS):
                return head
            return head + (
                f"; on {gpu} servers NVLS or NVLS-tree (the NVSwitch adds, so a GPU sends its buffer once instead of "
                "twice) is the likely one; CollNet needs SHARP switches, which EFA does not have, and PAT is not an "
                "allreduce algorithm in NCCL"
            )
        return (
            f"{row.case}: the published {row.published:.3f} is above the optimistic bound {row.ceiling:.3f}: more than "
            "any overlap of this allreduce allows, so something other than communication changed between the runs"
        )
    exposed = row.get("exposed (ms)", float("nan"))
    if row.measure == "bus bandwidth (GB/s)":
        side = "less" if row.error > 0 else "more"
        return f"{row.case}: NCCL got {side} of the links than the model gives it ({row.error:+.0%})"
    lost = row.predicted - row.published
    if lost > 0 and row["allreduce / backward"] < 0.5:
        return (
            f"{row.case}: the model's allreduce leaves {exposed:.1f} ms of a {row['compute (ms)']:.0f} ms step exposed, "
            f"so communication cannot explain the {100 * lost:.0f} points lost: a cost the model does not have (the "
            "GPUs of one server share its CPUs, memory, host links and input pipeline), not measured here"
        )
    if lost > 0:
        negotiation = (
            "; early Horovod's negotiation, every rank's readiness sent to rank 0 each cycle"
            if _fusion_of(library) is HOROVOD_0X
            else ""
        )
        return (
            f"{row.case}: {100 * lost:.0f} points below the prediction at {int(row.GPUs)} GPUs, with the same bytes, "
            "link and computation as the model prices: terms the model does not have and that grow with N "
            f"(stragglers: the slowest of N GPUs sets every step{negotiation})"
        )
    return f"{row.case}: {100 * -lost:.0f} points above the prediction: the model charges more than the run paid"


def write_layer_table(path=None) -> None:
    """Build every model of KERAS_MODELS without weights and write data/keras_layer_gradients.csv (about a minute on
    two cores): `python -c "from utils.allreduce_model import write_layer_table; write_layer_table()"`."""
    import keras
    import pandas as pd

    from utils.paths import DATA

    tables = []
    for name, application in KERAS_MODELS.items():
        table = layer_table(getattr(keras.applications, application)(weights=None))
        keras.backend.clear_session()
        table.insert(0, "model", name)
        table.insert(1, "keras_application", application)
        table.insert(2, "position", range(len(table)))
        tables.append(table)
    pd.concat(tables).to_csv(path or DATA / "keras_layer_gradients.csv", index=False)


def goal_verdict(table, share_goal: float = 0.75, configurations: int = 8, sources: int = 4) -> str:
    """Lesson 03's goal against `tally`'s table: at least `share_goal` of at least `configurations` comparable
    configurations from at least `sources` sources within GOAL; met, or by how much it is not."""
    comparable = table[table["class"].isin(["hit", "miss"])]
    share = float((comparable["class"] == "hit").mean()) if len(comparable) else 0.0
    n, k = len(comparable), comparable.source.nunique()
    within = 100 * GOAL["scaling efficiency"]
    head = (
        f"Goal ({share_goal:.0%} of at least {configurations} comparable configurations from at least {sources} "
        f"sources within ±{within:.0f}): "
    )
    if share >= share_goal and n >= configurations and k >= sources:
        return head + f"met, {share:.0%} of {n} from {k} sources"
    short = [f"{share_goal - share:.0%} short of the share"] if share < share_goal else []
    short += [f"{configurations - n} configurations short"] if n < configurations else []
    short += [f"{sources - k} sources short"] if k < sources else []
    return head + f"not met, {share:.0%} of {n} from {k} sources: " + ", ".join(short)


def trend_with_n(compared, cases) -> dict:
    """For each `series` of data/published_scaling.csv with rows at several sizes: its rows (by GPUs) and the change
    from the smallest to the largest size, published and predicted: {series: (rows, first N, last N, d_pub, d_model)}."""
    rows = compared[compared.measure.eq("scaling efficiency") & compared.predicted.notna()].merge(
        cases[["case", "series"]], on="case"
    )
    out = {}
    for name, group in rows[rows.series.notna()].groupby("series", sort=False):
        g = group.sort_values("GPUs")
        if g.GPUs.nunique() > 1:
            d_pub = float(g.published.iloc[-1] - g.published.iloc[0])
            d_mod = float(g.predicted.iloc[-1] - g.predicted.iloc[0])
            out[name] = (g, int(g.GPUs.iloc[0]), int(g.GPUs.iloc[-1]), d_pub, d_mod)
    return out


def trend_reading(trends: dict, tolerance: float = 0.05, sources: int | None = None) -> str:
    """Markdown generated from `trend_with_n`: each series' change with N, published against the model, and, where the
    model misses the fall by more than `tolerance`, the terms it lacks, by kind of cluster (`sources`: how many sources
    the table holds, for the closing sentence)."""
    lines, missed = [], []
    for name, (_, a, b, dp, dm) in trends.items():
        gap = dp - dm
        verdict = (
            f": the model misses {100 * -gap:.0f} points of the fall"
            if gap < -tolerance
            else (f": the model falls {100 * gap:.0f} points more" if gap > tolerance else ": the model follows it")
        )
        lines.append(f"- **{name}**, {a} → {b} GPUs: published {100 * dp:+.1f} points, model {100 * dm:+.1f}{verdict}")
        if gap < -tolerance:
            missed.append(name)
    if not missed:
        return "\n".join(lines)
    horovod = [s for s in missed if s.startswith("Horovod")]
    server = [s for s in missed if not s.startswith("Horovod")]
    text = (
        "\n\nWhere the model misses the fall, it lacks terms that grow with N. In every series, **stragglers**: "
        "lesson 02 measured that the slowest worker sets every step's pace, and the more GPUs, the slower the slowest."
    )
    if horovod:
        text += (
            f" In {', '.join(horovod)}, early Horovod's **negotiation**: at each cycle every rank sent its list of ready "
            "tensors to rank 0, which answered them all (`operations.cc` at 8318a89; Horovod's \"collective control "
            'plane", commit 92454dae of June 2018, came after the 512-GPU run).'
        )
    if server:
        text += (
            f" In {', '.join(server)}, each on one server: its GPUs share the server's CPUs, host links and input "
            "pipeline, which more GPUs load more."
        )
        machines = [
            s
            for s in server
            if trends[s][0].case.str.contains("dgx1").any() and trends[s][0].case.str.contains("dgx2").any()
        ]
        if machines:
            text += (
                f" ({', '.join(machines)} also changes machine: a DGX-1 at its smaller size, a DGX-2 at its larger.)"
            )
    return (
        "\n".join(lines)
        + text
        + f" The cycle ({1e3 * HOROVOD_0X.cycle_seconds:g} ms before Horovod 0.21) and the fusion buffer are in the model. "
        + ("None of the sources" if sources is None else f"None of the {sources} sources")
        + " gives a figure for these terms on its cluster, so they are named here, not added: a term whose size would "
        "have to be chosen to close the gap would be a fit."
    )


def horovod_fusion(cycle_ms: float) -> Fusion:
    """Today's Horovod (128 MiB fusion buffer) with the cycle a run sets in HOROVOD_CYCLE_TIME (milliseconds)."""
    return Fusion(
        f"Horovod >= 0.21, {cycle_ms:g} ms cycle", HOROVOD_NOW.fusion_bytes, cycle_ms / 1e3, False, HOROVOD_NOW.source
    )


def lab_efficiency(
    one_rank_step: float,
    compute_step: float,
    layer_bytes,
    link_bytes_per_s,
    fusion: Fusion,
    overhead_seconds: float = 0.0,
    n: int = 2,
    backward_share: float = BACKWARD_SHARE,
):
    """One rank's step over the N-rank step that `overlap_step` predicts at each link rate (bytes/s) for a ring of `n`
    ranks without latency (the lab's links): a float for one rate, an array for several."""
    out = [
        one_rank_step
        / overlap_step(
            compute_step,
            layer_bytes,
            lambda b, r=r: float(ring_seconds(n, b, 0.0, r)),
            backward_share=backward_share,
            fusion=fusion,
            overhead_seconds=overhead_seconds,
        ).seconds
        for r in np.atleast_1d(np.asarray(link_bytes_per_s, dtype=float))
    ]
    return np.array(out) if np.ndim(link_bytes_per_s) else out[0]
