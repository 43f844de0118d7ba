"""Start N local workers (Horovod or tf.distribute), bounded in threads and time, and always cleaned up.

Every worker runs in a process group of its own, with its output in a log file. When a worker exits
with an error, is killed by a signal, or the run outlives its timeout, every process of the run is
killed (process groups, descendants, and any process that carries the run's marker in its
environment, which catches the ranks `horovodrun` starts in groups of their own), the end of every
log is shown, and `WorkerError` says which worker failed and how.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import psutil

from utils import TF_STARTUP_NOISE

#: Environment variable that marks every process of one run, so clean-up finds them all.
RUN_MARKER = "COURSE_LAUNCH_RUN_ID"
#: Lines of TensorFlow start-up chatter that are not shown when output is streamed.
NOISE = TF_STARTUP_NOISE
LOG_TAIL_LINES = 25


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

    @property
    def output(self) -> str:
        """Everything the worker printed (stdout and stderr)."""
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
            for line in worker.output.splitlines():
                # horovodrun prefixes each rank's lines with "[rank]<stdout>:"
                text = line.split("<stdout>:", 1)[1] if "<stdout>:" in line else line
                if text.startswith(prefix):
                    found.append(json.loads(text[len(prefix):]))
        return sorted(found, key=lambda r: r.get("rank", 0))


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that limit one worker to `threads` compute threads."""
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a whole number of at least 1, got {threads!r}")
    t = str(threads)
    return {
        "OMP_NUM_THREADS": t,            # OpenMP (oneDNN) thread pools
        "MKL_NUM_THREADS": t,
        "OPENBLAS_NUM_THREADS": t,       # NumPy's BLAS
        "TF_NUM_INTRAOP_THREADS": t,     # TensorFlow: threads inside one op
        "TF_NUM_INTEROP_THREADS": "1",   # TensorFlow: ops run side by side
    }


def _base_env(threads: int, run_id: str, extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(thread_env(threads))
    env.update({
        RUN_MARKER: run_id,
        "PYTHONUNBUFFERED": "1",
        "TF_CPP_MIN_LOG_LEVEL": env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES", "-1"),
    })
    # Workers import the course's utils package from the repository, whatever their working folder.
    repo = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def _processes_of_run(run_id: str, roots: Sequence[int]) -> list[psutil.Process]:
    """Every live process of a run: the roots, their descendants, and any process with the marker."""
    found: dict[int, psutil.Process] = {}
    for pid in roots:
        try:
            proc = psutil.Process(pid)
            found[pid] = proc
            for child in proc.children(recursive=True):
                found[child.pid] = child
        except psutil.NoSuchProcess:
            pass
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid in found or proc.pid == me:
            continue
        try:
            if proc.environ().get(RUN_MARKER) == run_id:
                found[proc.pid] = proc
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
    return list(found.values())


def kill_run(run_id: str, roots: Sequence[int], grace: float = 3.0) -> None:
    """Terminate every process of a run (SIGTERM, then SIGKILL after `grace` seconds)."""
    procs = _processes_of_run(run_id, roots)
    for pid in roots:
        try:
            os.killpg(pid, signal.SIGTERM)  # each root leads its own process group
        except (ProcessLookupError, PermissionError):
            pass
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for pid in roots:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in alive + _processes_of_run(run_id, roots):
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(text[-lines:]) or "(no output)"


def _is_noise(line: str) -> bool:
    return any(n in line for n in NOISE) or not line.strip()


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
) -> RunResult:
    """Start one process per command, wait for all of them, and clean up whatever happens."""
    if not commands:
        raise ValueError("no worker to start: give at least one command")
    if len(envs) != len(commands):
        raise ValueError(f"{len(commands)} commands but {len(envs)} environments")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive (seconds), got {timeout}")
    log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="course-run-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    show = stream if callable(stream) else (lambda line: not _is_noise(line)) if stream else None
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    offsets: list[int] = []
    start = time.monotonic()
    failure: tuple[int | None, str] | None = None

    def pump() -> None:
        """Print the lines the workers wrote since the last call."""
        if show is None:
            return
        for rank, path in enumerate(logs):
            with path.open("rb") as f:
                f.seek(offsets[rank])
                data = f.read()
            cut = data.rfind(b"\n") + 1
            offsets[rank] += cut
            for line in data[:cut].decode(errors="replace").splitlines():
                if show(line):
                    print(f"[worker {rank}] {line}" if len(commands) > 1 else line, flush=True)

    try:
        for rank, (cmd, env) in enumerate(zip(commands, envs)):
            path = log_dir / f"worker-{rank}.log"
            logs.append(path)
            offsets.append(0)
            with path.open("wb") as out:
                procs.append(subprocess.Popen(list(cmd), env=env, stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
        while True:
            pump()
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                rank, code = bad[0]
                explained = explain_failure(logs[rank].read_text(errors="replace")) if explain_failure else None
                failure = explained or (rank, f"worker {rank} {_describe_exit(code)}")
                break
            if all(c == 0 for c in codes):
                break
            if time.monotonic() - start > timeout:
                running = [r for r, c in enumerate(codes) if c is None]
                failure = (explain_hang() if explain_hang else None) or (
                    running[0] if len(running) == 1 else None,
                    f"hung: worker(s) {running} did not exit within the timeout of {timeout:g} s")
                failure = (failure[0], failure[1].replace("{timeout}", f"{timeout:g}"))
                break
            time.sleep(0.1)
        pump()
    except KeyboardInterrupt:
        failure = (None, "interrupted by the user")
        raise
    finally:
        kill_run(run_id, [p.pid for p in procs])
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    seconds = time.monotonic() - start
    workers = [WorkerResult(rank=r, returncode=p.returncode, log_path=logs[r]) for r, p in enumerate(procs)]
    if failure is not None:
        rank, how = failure
        tails = "\n".join(f"--- end of worker {w.rank}'s log ({w.log_path}) ---\n{_tail(w.log_path)}" for w in workers)
        if len(workers) == 1 and rank is not None:
            # One launcher process (horovodrun or horovod.run) for all ranks: show the failed rank's own lines.
            mine = [line for line in workers[0].output.splitlines() if line.startswith(f"[{rank}]<")]
            if mine:
                tails += f"\n--- last lines of rank {rank} ---\n" + "\n".join(mine[-LOG_TAIL_LINES:])
        raise WorkerError(
            f"The run failed after {seconds:.1f} s: {how}. Every process of the run was stopped.\n"
            f"{tails}\nFull logs: {log_dir}",
            rank=rank, reason=how, log_dir=log_dir, seconds=seconds,
        )
    return RunResult(workers=workers, seconds=seconds, log_dir=log_dir, pids=[p.pid for p in procs])


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
    return {"cluster": {"worker": [f"localhost:{p}" for p in ports[:n]]},
            "task": {"type": "worker", "index": index}}


def free_ports(n: int) -> list[int]:
    """`n` distinct free TCP ports on this machine, picked now (never fixed numbers)."""
    import portpicker  # noqa: PLC0415

    ports: list[int] = []
    while len(ports) < n:
        port = portpicker.pick_unused_port()
        if port not in ports:
            ports.append(port)
    return ports


def launch_tf_workers(
    script: str | Path, n: int, args: Sequence[str] = (), *, threads: int = 1, timeout: float = 300,
    env: dict[str, str] | None = None, stream: bool | Callable[[str], bool] = True, log_dir: Path | None = None,
) -> RunResult:
    """Run `script` as `n` tf.distribute workers on localhost, each with its own TF_CONFIG."""
    _check_count(n, "the number of workers")
    path = _check_script(script)
    run_id = uuid.uuid4().hex
    ports = free_ports(n)
    envs = []
    for index in range(n):
        e = _base_env(threads, run_id, env)
        e["TF_CONFIG"] = json.dumps(tf_config(n, index, ports))
        envs.append(e)
    commands = [[sys.executable, str(path), *map(str, args)] for _ in range(n)]
    return run_workers(commands, envs, timeout=timeout, run_id=run_id, log_dir=log_dir, stream=stream)


def horovod_available() -> tuple[bool, str]:
    """Whether Horovod with TensorFlow and Gloo works here, and if not, why and what to do."""
    try:
        import horovod.tensorflow as hvd  # noqa: PLC0415
    except Exception as exc:
        return False, (f"Horovod is not available on this machine ({type(exc).__name__}: {exc}). "
                       "Run `make horovod` in a terminal and see the README, 'Troubleshooting the Horovod build'.")
    if not hvd.gloo_built():
        return False, "Horovod is installed but was built without Gloo; rebuild it with `make horovod`."
    if _horovodrun() is None:
        return False, "Horovod imports but its `horovodrun` command is missing; reinstall it with `make horovod`."
    return True, "Horovod with Gloo is available."


def _horovodrun() -> str | None:
    beside = Path(sys.executable).parent / "horovodrun"
    return str(beside) if beside.exists() else shutil.which("horovodrun")


def _horovodrun_failure(output: str) -> tuple[int, str] | None:
    """The first rank that made horovodrun fail, and how, read from its output."""
    import re  # noqa: PLC0415

    m = (re.search(r"Process (\d+) exit with status code (-?\d+)", output)
         or re.search(r"Process name: (\d+)\s+Exit code: (-?\d+)", output))
    if not m:
        return None
    rank, code = int(m.group(1)), int(m.group(2))
    # horovodrun reports a rank killed by signal S as 128 + S (or as -S).
    how = _describe_exit(-(code - 128)) if code > 128 else _describe_exit(code)
    return rank, f"rank {rank} {how}"


def _ranks_still_running(run_id: str) -> list[int]:
    """Horovod ranks of a run that are still alive (horovodrun gives each its HOROVOD_RANK)."""
    ranks = set()
    for proc in _processes_of_run(run_id, []):
        try:
            env = proc.environ()
            if "HOROVOD_RANK" in env and proc.status() != psutil.STATUS_ZOMBIE:
                ranks.add(int(env["HOROVOD_RANK"]))
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError, ValueError):
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
        return None, (f"hung: ranks {ranks} did not finish within the timeout of {{timeout}} s (when one rank "
                      "stops, the others wait for it in their next collective)")
    return explain


def launch_horovodrun(
    script: str | Path, np: int, args: Sequence[str] = (), *, threads: int = 1, timeout: float = 300,
    env: dict[str, str] | None = None, stream: bool | Callable[[str], bool] = True, log_dir: Path | None = None,
    horovodrun_args: Sequence[str] = (),
) -> RunResult:
    """Run `script` on `np` local ranks with `horovodrun --gloo -np N -H localhost:N` (plus `horovodrun_args`).

    With `--host-discovery-script` among `horovodrun_args` (elastic mode), `-H` is left out.
    """
    _check_count(np, "np (the number of ranks)")
    path = _check_script(script)
    ok, why = horovod_available()
    if not ok:
        raise RuntimeError(why)
    run_id = uuid.uuid4().hex
    hosts = [] if "--host-discovery-script" in horovodrun_args else ["-H", f"localhost:{np}"]
    command = [_horovodrun(), "--gloo", "-np", str(np), *hosts, *map(str, horovodrun_args),
               sys.executable, str(path), *map(str, args)]
    return run_workers([command], [_base_env(threads, run_id, env)], timeout=timeout, run_id=run_id,
                       log_dir=log_dir, stream=stream, explain_failure=_horovodrun_failure,
                       explain_hang=_horovod_hang(run_id))


def horovod_run(
    fn: Callable[..., Any], np: int, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None, *,
    threads: int = 1, timeout: float = 300, stream: bool | Callable[[str], bool] = True,
) -> list[Any]:
    """Call `fn(*args, **kwargs)` on `np` ranks with `horovod.run` (Gloo); return each rank's result."""
    _check_count(np, "np (the number of ranks)")
    ok, why = horovod_available()
    if not ok:
        raise RuntimeError(why)
    import cloudpickle  # noqa: PLC0415

    run_id = uuid.uuid4().hex
    work = Path(tempfile.mkdtemp(prefix="course-hvdrun-"))
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
    run_workers([command], [_base_env(threads, run_id, None)], timeout=timeout, run_id=run_id,
                log_dir=work, stream=stream, explain_failure=_horovodrun_failure, explain_hang=_horovod_hang(run_id))
    import pickle  # noqa: PLC0415

    return pickle.loads((work / "results.pkl").read_bytes())


def _horovod_run_driver(work: Path) -> None:
    """Inside the driver process: unpickle the job, run it with horovod.run, pickle the results."""
    import pickle  # noqa: PLC0415

    import cloudpickle  # noqa: PLC0415
    import horovod  # noqa: PLC0415

    fn, args, kwargs, np = pickle.loads((work / "job.pkl").read_bytes())
    results = horovod.run(fn, args=args, kwargs=kwargs, np=np, hosts=f"localhost:{np}", use_gloo=True)
    (work / "results.pkl").write_bytes(cloudpickle.dumps(results))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "horovod-run":
        _horovod_run_driver(Path(sys.argv[2]))
    else:
        sys.exit("usage: python -m utils.launch horovod-run WORK_DIR (used by utils.launch.horovod_run)")
