"""Every run tracked: MLflow, in a local SQLite store that the course creates itself (no server to install), or
SageMaker's managed MLflow tracking server in a real job.

A training script tracks its run when MLFLOW_TRACKING_URI is set in its environment (MLflow's own variable; in a
SageMaker job, the tracking server's ARN, which the `sagemaker-mlflow` plugin turns into signed requests). Only the
process that writes the model logs (Horovod's rank 0, tf.distribute's chief): one run per job, with its parameters,
its world size, and each epoch's loss, validation loss and throughput.

    env = tracking.environment("lesson 05")           # MLFLOW_TRACKING_URI and MLFLOW_EXPERIMENT_NAME
    launch.launch_tf_workers(script, 2, args=..., env=env)
    tracking.runs()                                     # every run of the store, as a table

Tracking never costs a learner a run: a store that cannot be written is said so once, and training goes on
untracked. A run that ends in an exception is marked FAILED; one killed outright (SIGKILL, a lost machine) is
marked FAILED by the next reader of the store, which finds its process gone.

A store is made (its tables, its experiments) by one process at a time, whoever asks first: a lock file beside it
(`mlflow.db.lock`) is held meanwhile. A store whose file is damaged (emptied, or corrupted so that SQLite cannot
read it) is never taken for a new one: writing, reading and the UI each say which file, what is wrong and what to
do, in one line (DamagedStore).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import sys
import threading
from pathlib import Path

from utils import paths

URI_ENV = "MLFLOW_TRACKING_URI"
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
#: The course's own variable for a run's name (MLflow has none; a job's runs default to TRAINING_JOB_NAME).
RUN_NAME_ENV = "COURSE_RUN_NAME"
#: What MLflow does by default and the course does not want: report usage to MLflow's telemetry service, and retry
#: an unreachable server for minutes (7 retries, 120 s each) while a job's instances are billed.
QUIET = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}
#: The MLflow of the course's local store (runs/tracking/mlflow.db): this environment's mlflow, which
#: tests/test_tracking.py checks. Not the jobs' client: that one is the managed server's (job_requirements).
MLFLOW_VERSION = "3.17.2"
#: The tracking-server versions AWS pairs with an MLflow client ("For tracking server 2.13.x, use mlflow==2.13.2",
#: "2.16.x ... 2.16.2", "3.0.x ... mlflow==3.0.0": AWS, "Integrate MLflow with your environment",
#: https://docs.aws.amazon.com/sagemaker/latest/dg/mlflow-track-experiments.html); the API's model lists none.
AWS_PAIRED_MLFLOW = {"2.13": "2.13.2", "2.16": "2.16.2", "3.0": "3.0.0"}
#: The MLflow version of the managed tracking server the course asks for (CreateMlflowTrackingServer's
#: MlflowVersion), set, never left to AWS's default: the newest that AWS's page pairs with a client.
MANAGED_MLFLOW_VERSION = "3.0.0"
#: SageMaker's plugin that signs MLflow's requests to a managed server (it needs mlflow-skinny>=2.8).
PLUGIN = "sagemaker-mlflow==0.5.0"


def paired_client(server_version: str) -> str:
    """The MLflow client AWS pairs with a tracking server of `server_version` (its major.minor), or ValueError
    naming the versions AWS pairs."""
    client = AWS_PAIRED_MLFLOW.get(".".join(str(server_version).split(".")[:2]))
    if client is None:
        listed = ", ".join(f"{k}.x" for k in AWS_PAIRED_MLFLOW)
        raise ValueError(
            f"AWS pairs no MLflow client with a tracking server {server_version} (its page lists {listed}): ask for "
            "one of those (mlflow_version=), or read AWS's 'Integrate MLflow with your environment' for a newer pair"
        )
    return client


def job_requirements(server_version: str = MANAGED_MLFLOW_VERSION) -> tuple[str, ...]:
    """What a SageMaker job's container installs (the source code's requirements.txt) to log to a managed server
    of `server_version`: the client AWS pairs with it, and the plugin that signs requests. AWS's TensorFlow 2.21
    image already has mlflow, mlflow-skinny and mlflow-tracing (3.14.0 at its release, 3.15.1 after a security
    update) and sagemaker-mlflow 0.4.0 (aws/deep-learning-containers docker/tensorflow/2.21/cuda/uv.lock, its
    `sagemaker` extra), and so does the course's Horovod image built on it. The three packages write one folder,
    `mlflow/` (mlflow pins mlflow-skinny to its own version, and mlflow-tracing too from 3.2 on), so all three are
    installed at the client's version: one left at the image's would mix two versions' files. MLflow 2 has no
    mlflow-tracing to pin, so a 2.x server's client cannot be installed whole over the image: refused."""
    client = paired_client(server_version)
    if int(client.split(".")[0]) < 3:
        raise ValueError(
            f"a tracking server {server_version} pairs with mlflow=={client}, which cannot be installed whole over "
            "AWS's TensorFlow 2.21 image: its mlflow-tracing 3.x would stay in the same mlflow/ folder (MLflow 2 has "
            f"none to pin). Ask for a {', '.join(k + '.x' for k in AWS_PAIRED_MLFLOW if not k.startswith('2.'))} "
            "server instead"
        )
    return tuple(f"{name}=={client}" for name in ("mlflow", "mlflow-skinny", "mlflow-tracing")) + (PLUGIN,)


#: What a job installs for the course's managed server (MANAGED_MLFLOW_VERSION).
JOB_REQUIREMENTS = job_requirements()
#: The course's local store (runs/ is ignored by git; a fresh clone starts with none).
STORE = paths.RUNS / "tracking" / "mlflow.db"
#: A SageMaker managed MLflow resource, as CreateTrainingJob's MlflowConfig.MlflowResourceArn is checked (botocore).
ARN_PATTERN = r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:mlflow-[a-zA-Z-]*/.*"
METRICS = ("loss", "val_loss", "samples_per_s")
#: What SQLite says of a file it cannot read as a database (its own words, in its errors and its checks).
DAMAGE_SIGNS = ("database disk image is malformed", "file is not a database", "malformed database schema")


class DamagedStore(RuntimeError):
    """A tracking store whose file SQLite cannot read (or that was emptied): which file, what is wrong, what to do."""

    def __init__(self, store: str | Path, what: str):
        self.store, self.what = Path(store).absolute(), what
        aside = [p for p in (self.store, *(Path(f"{self.store}-{s}") for s in ("journal", "wal", "shm"))) if p.exists()]
        move = "; ".join(f"mv {shlex.quote(str(p))} {shlex.quote(str(p) + '.damaged')}" for p in aside or [self.store])
        super().__init__(
            f"the tracking store {self.store} is damaged ({what}): move it aside ({move}) and the next tracked run "
            "starts a new store there; the runs in it are lost"
        )


class NotAStore(DamagedStore):
    """A folder (or other non-file) where the tracking store's file should be: which path, what to do."""

    def __init__(self, store: str | Path):
        self.store, self.what = Path(store).absolute(), "not a file"
        RuntimeError.__init__(
            self,
            f"the tracking store {self.store} is a folder, not a store file: give the path of a file (a new one is "
            "made there), or move that folder away",
        )


def _check_store(store: str | Path) -> None:
    """Raise DamagedStore where the file at `store` is empty or SQLite cannot read it whole (SQLite's quick_check);
    no file is no fault (a new store). Other troubles (a store busy, a folder that cannot be read) are left to
    MLflow, which says them itself. The file is opened read-only: a damaged store is left as it is."""
    import sqlite3

    store = Path(store)
    if store.exists() and not store.is_file():  # SQLite cannot open it, and MLflow retries for about 100 s first
        raise NotAStore(store)
    try:
        if store.stat().st_size == 0:  # what SQLite (and so MLflow) would silently take for a new, empty store
            raise DamagedStore(store, "its file is empty: 0 bytes")
    except OSError:  # no file yet: a new store; no folder, or one that cannot be read: MLflow says so
        return
    try:
        with contextlib.closing(sqlite3.connect(f"{store.absolute().as_uri()}?mode=ro", uri=True)) as db:
            found = [row[0] for row in db.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as err:
        if any(sign in str(err) for sign in DAMAGE_SIGNS):
            raise DamagedStore(store, f"SQLite: {err}") from None
        return
    if found != ["ok"]:
        raise DamagedStore(store, f"SQLite's check: {' '.join(str(found[0]).split())}")


def _damage(err: BaseException, store: str | Path | None) -> DamagedStore | None:
    """The DamagedStore that an error of MLflow (SQLAlchemy's, SQLite's beneath it) means, if it means one."""
    if isinstance(err, DamagedStore):
        return err
    seen = err
    while seen is not None and store is not None:
        for sign in DAMAGE_SIGNS:
            if sign in str(seen):
                return DamagedStore(store, f"SQLite: {sign}")
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def _said_if_damaged(store: str | Path):
    """MLflow's errors on a damaged store, raised as the one line of a DamagedStore."""
    try:
        yield
    except Exception as err:
        damage = _damage(err, store)
        if damage is None:
            raise
        raise damage from None


@contextlib.contextmanager
def _store_lock(store: str | Path):
    """Held while `store` is checked, created or migrated, and its experiment made: one process at a time (an
    exclusive flock on `<store>.lock`, beside it). MLflow's client takes no lock of its own when it creates a
    SQLite store's tables, and two processes creating them at once collide (`duplicate column name`, and one run
    untracked). Where the lock file cannot be made or locked (a read-only folder, no folder yet, a file system
    without locks, no fcntl) the store is opened without it, as MLflow would."""
    try:
        import fcntl

        lock = open(Path(store).with_name(Path(store).name + ".lock"), "a")  # held for the block, closed below
    except (ImportError, OSError):
        yield
        return
    with lock:  # closing it releases the lock
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
        except OSError:  # a file system without locks (ENOLCK)
            pass
        yield


def _sqlite_store(uri: str) -> Path | None:
    """The file of a `sqlite:` tracking URI (as SQLAlchemy, and so MLflow, reads it); None for any other URI."""
    if not uri.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(uri).database
    return Path(database) if database and database != ":memory:" else None


def _prepare(store: Path, uri: str, experiment: str) -> None:
    """Check `store`, create its tables and `experiment` (its files beside the store) where they are missing: all
    under the store's lock, so that processes making a fresh store at once do it one after the other."""
    from mlflow.tracking import MlflowClient

    with _store_lock(store), _said_if_damaged(store), _quiet_logs():
        _check_store(store)
        client = MlflowClient(tracking_uri=uri)  # its first call creates and migrates the tables
        if client.get_experiment_by_name(experiment) is None:
            artifacts = Path(store).resolve().parent / "artifacts"
            client.create_experiment(experiment, artifact_location=artifacts.as_uri())


def local_uri(store: str | Path = STORE) -> str:
    """The tracking URI of a SQLite store at `store` (its folder is created; MLflow creates the tables)."""
    from urllib.parse import quote

    store = Path(store).resolve()
    store.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{quote(str(store))}"  # a '#' or '?' in a folder's name would end the path


def _check_experiment(experiment: str) -> None:
    if not experiment or not re.fullmatch(r"[\w .:/-]{1,200}", experiment):
        raise ValueError(f"an experiment name is 1 to 200 letters, digits, spaces or . : / - _, got {experiment!r}")


def environment(experiment: str, store: str | Path = STORE) -> dict[str, str]:
    """The environment that makes a training script log into `store`, under `experiment`. The store's tables and
    the experiment are created here, once, before any worker starts (a run started without it makes them itself,
    under the same lock); the experiment's files go to the store's folder, not to a worker's (MLflow's default,
    ./mlruns). A damaged store raises DamagedStore."""
    _check_experiment(experiment)
    os.environ.update(QUIET)
    uri = local_uri(store)
    _prepare(Path(store), uri, experiment)  # quiet: MLflow and Alembic announce new tables on stderr
    return {URI_ENV: uri, EXPERIMENT_ENV: experiment, **QUIET}


class _quiet_logs:
    """MLflow's and Alembic's INFO messages held back while the store is opened (warnings still show)."""

    NAMES = ("mlflow", "alembic")

    def __enter__(self):
        import logging

        self.levels = {n: logging.getLogger(n).level for n in self.NAMES}
        for n in self.NAMES:
            logging.getLogger(n).setLevel(logging.WARNING)

    def __exit__(self, *exc):
        import logging

        for n, level in self.levels.items():
            logging.getLogger(n).setLevel(level)


def check_arn(arn: str) -> str:
    """A managed MLflow tracking server's ARN, checked as CreateTrainingJob checks MlflowResourceArn; else why not."""
    if not isinstance(arn, str) or not re.fullmatch(ARN_PATTERN, arn) or len(arn) > 2048:
        raise ValueError(
            f"not the ARN of a SageMaker managed MLflow tracking server: {arn!r}; it looks like "
            "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/my-server (the console's "
            "MLflow page, or `aws sagemaker list-mlflow-tracking-servers`, shows it)"
        )
    return arn


def job_environment(arn: str, experiment: str) -> dict[str, str]:
    """The Environment entries that make a SageMaker job's training script log to the managed MLflow server `arn`
    (the container also needs `mlflow` and `sagemaker-mlflow` installed, from the source code's requirements)."""
    _check_experiment(experiment)
    return {URI_ENV: check_arn(arn), EXPERIMENT_ENV: experiment, **QUIET}


class Run:
    """The tracked run of one training process; inert where tracking is off or this process does not log."""

    def __init__(self, params: dict, *, world_size: int, logs: bool, kind: str):
        self.active, self.mlflow, self.run_id, self.store = False, None, None, None
        self.stopped = False  # set by a SIGTERM: the run ends FAILED whatever the script says after it
        self._ending = threading.Lock()
        uri = os.environ.get(URI_ENV, "")
        if not uri or not logs:
            return
        try:
            import mlflow

            if uri.startswith("arn:"):
                check_arn(uri)  # the sagemaker-mlflow plugin resolves it; a typo should say so, not time out
            os.environ.pop("MLFLOW_RUN_ID", None)  # MLflow would resume that run instead of starting this one
            experiment = os.environ.get(EXPERIMENT_ENV) or "course"
            self.store = _sqlite_store(uri)
            if self.store is not None:  # as tracking.environment() does: checked, made once, under the lock
                _prepare(self.store, uri, experiment)
            mlflow.set_tracking_uri(uri)
            mlflow.set_experiment(experiment)
            name = os.environ.get(RUN_NAME_ENV) or os.environ.get("TRAINING_JOB_NAME") or f"{kind} x{world_size}"
            run = mlflow.start_run(run_name=name)
            mlflow.log_params({k: v for k, v in params.items() if v not in (None, "")})
            mlflow.set_tags(
                {
                    "world_size": str(world_size),
                    "kind": kind,
                    "pid": str(os.getpid()),
                    "host": socket.gethostname(),
                    "machine": machine_id(),  # the lab's hosts have their own names but share this kernel
                    "script": Path(sys.argv[0]).name,
                }
            )
            mlflow.log_param("world_size", world_size)
        except Exception as err:  # whatever the store's fault, the training goes on
            print(f"TRACKING off: {self._why(err, f'cannot write to {uri}: ')}; training goes on", flush=True)
            return
        self.active, self.mlflow, self.run_id = True, mlflow, run.info.run_id
        print(f"TRACKING run {self.run_id} in {uri}", flush=True)

    def epoch(self, epoch: int, logs: dict) -> None:
        """Log epoch `epoch`'s metrics (the ones of METRICS that `logs` has)."""
        if not self.active:
            return
        try:
            values = {k: float(logs[k]) for k in METRICS if k in logs}
            self.mlflow.log_metrics(values, step=epoch)
        except Exception as err:
            print(f"TRACKING off after epoch {epoch}: {self._why(err)}; training goes on", flush=True)
            self.active = False

    def end(self, ok: bool) -> bool:
        """Mark the run FINISHED or FAILED (FAILED once a SIGTERM came); False where it was not recorded."""
        with self._ending:  # the script's own end and a SIGTERM's, from its thread: one of them, once
            if not self.active:
                return True
            status = "FINISHED" if ok and not self.stopped else "FAILED"
            self.active = False
            try:
                # By the run's id, not mlflow.end_run: that drops the run from MLflow's list of active runs before
                # it writes, so where the write failed, nothing was left for a second try to end.
                self.mlflow.MlflowClient().set_terminated(self.run_id, status)
            except Exception as err:
                print(f"TRACKING: the run's end was not recorded: {self._why(err)}", flush=True)
                with contextlib.suppress(Exception):
                    self.mlflow.end_run(status)  # one more try, and off MLflow's list: its exit hook says FINISHED
                return False
            with contextlib.suppress(Exception):  # recorded; this takes the run off MLflow's active list
                self.mlflow.end_run(status)
            return True

    def _why(self, err: Exception, where: str = "") -> str:
        """An error of the store in words: a damaged store's one line, else the error as MLflow raised it."""
        damage = _damage(err, self.store)
        return str(damage) if damage is not None else f"{where}{type(err).__name__}: {err}"


def keras_callback(run: Run):
    """A Keras callback that logs each epoch's metrics into `run` (the script ends the run itself)."""
    import keras

    class Track(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            run.epoch(epoch + 1, logs or {})

    return Track()


def start(args, *, world_size: int, logs: bool, kind: str) -> Run:
    """The run of a training script: its parsed `args` as parameters; ended FAILED if the script raises."""
    run = Run(vars(args), world_size=world_size, logs=logs, kind=kind)
    if run.active:
        previous = sys.excepthook

        def failed(*exc):
            run.end(ok=False)
            previous(*exc)

        sys.excepthook = failed
        import atexit
        import signal

        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return run  # the script handles SIGTERM itself
        wake_read, wake_write = os.pipe()
        owner = os.getpid()

        def end_then_exit():  # waits from the start: a signal handler only writes a byte, a signal-safe step
            os.read(wake_read, 1)
            try:
                run.end(ok=False)  # waits, where it must, for the main thread's own write to the store to commit
            finally:  # even where the end could not be written, or its message found no reader
                os.kill(os.getpid(), signal.SIGTERM)

        def stopped(signum, frame):  # SIGTERM: a stopped job, a spot reclaim, the course's launcher stopping a run
            # The handler runs in the main thread between two of its steps: perhaps in the middle of its own write
            # to the store, which holds the store's lock until it commits, or inside a callback that drops what it
            # raises (CI saw JAX's garbage-collector callback). So it writes nothing and raises nothing: the thread
            # above ends the run FAILED, then lets the signal end the process as it ends any process.
            signal.signal(signum, signal.SIG_DFL)
            if os.getpid() != owner:  # a forked child: the run and the thread are its parent's
                os.kill(os.getpid(), signum)
                return
            run.stopped = True
            os.write(wake_write, b"!")

        def exiting():  # the script ended before that thread could: end as the signal would have ended it
            if run.stopped:
                run.end(ok=False)
                os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=end_then_exit, name="tracking-stop", daemon=True).start()
        atexit.register(exiting)
        signal.signal(signal.SIGTERM, stopped)
    return run


def machine_id() -> str:
    """This running kernel's identity (Linux's boot id); the host name where there is none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()


def reconcile(client) -> list[str]:
    """Mark FAILED every RUNNING run of this machine whose process is gone (killed before it could end its run)."""
    import psutil

    here, ended = machine_id(), []
    for run in client.search_runs(
        [e.experiment_id for e in client.search_experiments()], "attributes.status = 'RUNNING'"
    ):
        tags = run.data.tags
        if tags.get("machine", tags.get("host")) != here or not tags.get("pid", "").isdigit():
            continue
        pid = int(tags["pid"])
        alive = psutil.pid_exists(pid)
        if alive:
            try:  # a reused pid belongs to a process started after the run; a zombie is gone
                proc = psutil.Process(pid)
                alive = proc.create_time() * 1000 <= run.info.start_time + 1000
                alive = alive and proc.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                alive = False
        if not alive:
            client.set_tag(run.info.run_id, "ended_by", "its process was gone: killed before it could end the run")
            client.set_terminated(run.info.run_id, "FAILED")
            ended.append(run.info.run_id)
    return ended


def runs(store: str | Path = STORE, experiments: list[str] | None = None):
    """Every run in `store` (of `experiments`, or all) as a table: one row per run, its parameters, tags, status and
    its last epoch's metrics, newest first; runs whose process died are marked FAILED first. A damaged store
    raises DamagedStore."""
    if not Path(store).exists():
        raise FileNotFoundError(f"no tracking store at {store} yet: run a lesson's tracked runs first")
    os.environ.update(QUIET)
    with _said_if_damaged(store):
        client = _reader(store)
        with _quiet_logs():
            reconcile(client)
        return _table(client, experiments)


def _reader(store: str | Path):
    """A client of the existing store `store`, checked first (DamagedStore), and opened under its lock: a store
    another process is making (its file still empty, its tables half made) is read once it is made."""
    from mlflow.tracking import MlflowClient

    with _store_lock(store), _quiet_logs():
        _check_store(store)
        client = MlflowClient(tracking_uri=local_uri(store))
        client.search_experiments(max_results=1)  # MLflow opens the store (its tables exist: nothing is made)
    return client


def _table(client, experiments: list[str] | None):
    import pandas as pd

    found = client.search_experiments()
    wanted = [e for e in found if experiments is None or e.name in experiments]
    rows = []
    for run in client.search_runs([e.experiment_id for e in wanted], order_by=["attributes.start_time DESC"]):
        rows.append(
            {
                "experiment": next(e.name for e in wanted if e.experiment_id == run.info.experiment_id),
                "run": run.info.run_name,
                "run_id": run.info.run_id,
                "started": pd.Timestamp(run.info.start_time, unit="ms"),
                "status": run.info.status,
                "kind": run.data.tags.get("kind", ""),
                "world_size": int(run.data.params.get("world_size", 0) or 0),
                **{f"param.{k}": v for k, v in run.data.params.items() if k != "world_size"},
                **run.data.metrics,
            }
        )
    columns = ["experiment", "run", "run_id", "started", "status", "kind", "world_size", *METRICS]
    return pd.DataFrame(rows, columns=list(dict.fromkeys([*columns, *(k for r in rows for k in r)])))


def history(run_id: str, metric: str, store: str | Path = STORE) -> list[tuple[int, float]]:
    """(epoch, value) of `metric` over a run's epochs, from the store."""
    if not Path(store).exists():
        raise FileNotFoundError(f"no tracking store at {store}")
    with _said_if_damaged(store):
        client = _reader(store)
        return sorted((m.step, m.value) for m in client.get_metric_history(run_id, metric))


class UI:
    """MLflow's web UI on the store, served on this machine (127.0.0.1) until `stop` or the end of a `with` block.

    Since MLflow 3.5.0 the server answers only requests addressed to an allowed host (a guard against DNS
    rebinding), by default localhost and private IP addresses (mlflow/server/security_utils.py,
    get_default_allowed_hosts): behind another host name, such as a SageMaker notebook instance's Jupyter proxy
    (https://<instance>.notebook.<region>.sagemaker.aws/proxy/<port>/), pass that name as `allowed_host`, and it
    is given to `--allowed-hosts` and, as an https origin, to `--cors-allowed-origins`. The server's own messages
    go to `log` (runs/tracking/ui.log). A damaged store raises DamagedStore before any server starts.

    The server's temporary folder is its own (`tmp`, removed by `stop`): MLflow's server leaves an empty
    `db_init_lock-<hash>` in the temporary folder for each store whose jobs its page asks for (the job store's
    lock, mlflow/store/db/utils.py), which the system's temporary folder would keep."""

    def __init__(self, store: str | Path = STORE, port: int | None = None, timeout: float = 90, allowed_host: str = ""):
        self.store, self.port, self.timeout, self.proc, self.tmp = Path(store), port, timeout, None, None
        self.allowed_host, self.log = allowed_host, Path(store).parent / "ui.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> UI:
        import subprocess
        import tempfile
        import time
        import urllib.request

        from utils import launch

        if not self.store.exists():
            raise FileNotFoundError(f"no tracking store at {self.store} yet: run a lesson's tracked runs first")
        with _store_lock(self.store):  # not while a run is making it
            _check_store(self.store)
        self.port = self.port or launch.free_ports(1)[0]
        command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", local_uri(self.store)]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        if self.allowed_host:
            command += ["--allowed-hosts", f"{self.allowed_host},localhost:{self.port},127.0.0.1:{self.port}"]
            command += ["--cors-allowed-origins", f"https://{self.allowed_host}"]
        self.tmp = Path(tempfile.mkdtemp(prefix="mlflow-ui-"))
        env = {**os.environ, **QUIET, "TMPDIR": str(self.tmp)}
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"MLflow's server ended at start: {self.log.read_text()[-1500:]}")
            try:
                with urllib.request.urlopen(self.url + "health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"MLflow's server did not answer on port {self.port} within {self.timeout:.0f} s")

    def run_names(self) -> list[str]:
        """The names of the runs the server lists, asked through its REST API as the page asks it."""
        import json
        import urllib.request

        def post(path: str, body: dict) -> dict:
            request = urllib.request.Request(
                self.url + "api/2.0/mlflow/" + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.loads(answer.read())

        ids = [e["experiment_id"] for e in post("experiments/search", {"max_results": 1000})["experiments"]]
        found = post("runs/search", {"experiment_ids": ids, "max_results": 1000}).get("runs", [])
        return [r["info"].get("run_name", "") for r in found]

    def stop(self) -> None:
        import shutil

        import psutil

        from utils import processes

        if self.proc is not None and self.proc.poll() is None:
            server = psutil.Process(self.proc.pid)
            processes.stop([server, *server.children(recursive=True)], grace=15)  # the server and its worker
            self.proc.wait(timeout=15)
        self.proc = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __enter__(self) -> UI:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
