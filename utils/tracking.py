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
"""

from __future__ import annotations

import os
import re
import socket
import sys
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
#: What a SageMaker job's container installs to log to a managed server (from the source code's requirements.txt):
#: MLflow's client without its server, and the plugin that signs requests to the ARN.
JOB_REQUIREMENTS = ("mlflow-skinny==3.17.2", "sagemaker-mlflow==0.5.0")
#: The course's local store (runs/ is ignored by git; a fresh clone starts with none).
STORE = paths.RUNS / "tracking" / "mlflow.db"
#: A SageMaker managed MLflow resource, as CreateTrainingJob's MlflowConfig.MlflowResourceArn is checked (botocore).
ARN_PATTERN = r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:mlflow-[a-zA-Z-]*/.*"
METRICS = ("loss", "val_loss", "samples_per_s")


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
    the experiment are created here, once, before any worker starts: several processes creating a fresh SQLite
    store at once can leave it unusable, and an experiment made by a worker would keep its files under that
    worker's folder (MLflow's default, ./mlruns); here they go to the store's folder."""
    _check_experiment(experiment)
    os.environ.update(QUIET)
    from mlflow.tracking import MlflowClient

    uri = local_uri(store)
    with _quiet_logs():  # MLflow and Alembic announce the new tables on stderr, in the learner's notebook
        client = MlflowClient(tracking_uri=uri)
        if client.get_experiment_by_name(experiment) is None:
            artifacts = Path(store).resolve().parent / "artifacts"
            try:
                client.create_experiment(experiment, artifact_location=artifacts.as_uri())
            except Exception:  # another process created it meanwhile
                if client.get_experiment_by_name(experiment) is None:
                    raise
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
        self.active, self.mlflow, self.run_id = False, None, None
        uri = os.environ.get(URI_ENV, "")
        if not uri or not logs:
            return
        try:
            import mlflow

            if uri.startswith("arn:"):
                check_arn(uri)  # the sagemaker-mlflow plugin resolves it; a typo should say so, not time out
            os.environ.pop("MLFLOW_RUN_ID", None)  # MLflow would resume that run instead of starting this one
            mlflow.set_tracking_uri(uri)
            mlflow.set_experiment(os.environ.get(EXPERIMENT_ENV) or "course")
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
            print(f"TRACKING off: cannot write to {uri}: {type(err).__name__}: {err}; training goes on", flush=True)
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
            print(f"TRACKING off after epoch {epoch}: {type(err).__name__}: {err}; training goes on", flush=True)
            self.active = False

    def end(self, ok: bool) -> None:
        """Mark the run FINISHED or FAILED."""
        if not self.active:
            return
        self.active = False
        try:
            self.mlflow.end_run("FINISHED" if ok else "FAILED")
        except Exception as err:
            print(f"TRACKING: the run's end was not recorded: {type(err).__name__}: {err}", flush=True)


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
        import signal

        def stopped(signum, frame):  # SIGTERM: a stopped job, a spot reclaim, the course's launcher stopping a run
            run.end(ok=False)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
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
    its last epoch's metrics, newest first; runs whose process died are marked FAILED first."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    if not Path(store).exists():
        raise FileNotFoundError(f"no tracking store at {store} yet: run a lesson's tracked runs first")
    os.environ.update(QUIET)
    with _quiet_logs():
        client = MlflowClient(tracking_uri=local_uri(store))
        reconcile(client)
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
    from mlflow.tracking import MlflowClient

    if not Path(store).exists():
        raise FileNotFoundError(f"no tracking store at {store}")
    client = MlflowClient(tracking_uri=local_uri(store))
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, metric))


class UI:
    """MLflow's web UI on the store, served on this machine (127.0.0.1) until `stop` or the end of a `with` block.

    MLflow 3's server answers only requests addressed to localhost unless told otherwise (a guard against DNS
    rebinding): behind another host name, such as a SageMaker notebook instance's Jupyter proxy
    (https://<instance>.notebook.<region>.sagemaker.aws/proxy/<port>/), pass that name as `allowed_host`, and it
    is given to `--allowed-hosts` and, as an https origin, to `--cors-allowed-origins`. The server's own messages
    go to `log` (runs/tracking/ui.log)."""

    def __init__(self, store: str | Path = STORE, port: int | None = None, timeout: float = 90, allowed_host: str = ""):
        self.store, self.port, self.timeout, self.proc = Path(store), port, timeout, None
        self.allowed_host, self.log = allowed_host, Path(store).parent / "ui.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> UI:
        import subprocess
        import time
        import urllib.request

        from utils import launch

        if not self.store.exists():
            raise FileNotFoundError(f"no tracking store at {self.store} yet: run a lesson's tracked runs first")
        self.port = self.port or launch.free_ports(1)[0]
        command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", local_uri(self.store)]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        if self.allowed_host:
            command += ["--allowed-hosts", f"{self.allowed_host},localhost:{self.port},127.0.0.1:{self.port}"]
            command += ["--cors-allowed-origins", f"https://{self.allowed_host}"]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **QUIET}, start_new_session=True
            )
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
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
        import psutil

        from utils import processes

        if self.proc is not None and self.proc.poll() is None:
            server = psutil.Process(self.proc.pid)
            processes.stop([server, *server.children(recursive=True)], grace=15)  # the server and its worker
            self.proc.wait(timeout=15)
        self.proc = None

    def __enter__(self) -> UI:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
