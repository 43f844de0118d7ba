"""Every run tracked: the training scripts log into a fresh local MLflow store (SQLite, created by the first run);
one run per job, from the process that writes the model; failures leave the store usable and the run FAILED.
A Horovod job logged once, by rank 0, with its world size is asserted where lesson 04 runs one (CI executes it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import botocore.session
import pytest

from utils import paths, tracking

TINY = ["--width", "32", "--depth", "1", "--batch-size", "128", "--epochs", "2", "--data-size", "2000"]


def single(env: dict, *extra, check=True):
    out = subprocess.run(
        [sys.executable, str(paths.SCRIPTS / "train_single.py"), *TINY, *extra],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **env},
        cwd=paths.REPO_ROOT,
    )
    if check:
        assert out.returncode == 0, out.stderr[-2000:]
    return out


def test_a_tracked_run_lands_in_a_fresh_store_with_its_parameters_and_every_epoch(tmp_path):
    store = tmp_path / "fresh" / "mlflow.db"
    out = single(tracking.environment("tests", store))
    assert "RESULT " in out.stdout and "TRACKING run " in out.stdout
    table = tracking.runs(store)
    assert len(table) == 1
    run = table.iloc[0]
    assert (run.experiment, run.status, run.kind, run.world_size) == ("tests", "FINISHED", "single", 1)
    assert run["param.width"] == "32" and run["param.batch_size"] == "128"
    from mlflow.tracking import MlflowClient  # files of the experiment beside the store, not in a worker's folder

    experiment = MlflowClient(tracking.local_uri(store)).get_experiment_by_name("tests")
    assert experiment.artifact_location == (store.parent / "artifacts").as_uri()
    for metric in tracking.METRICS:
        assert [step for step, _ in tracking.history(run.run_id, metric, store)] == [1, 2], metric
    assert tracking.history(run.run_id, "samples_per_s", store)[0][1] > 0


#: A tracked script as the training scripts track (tracking.start, an epoch logged at a time, a RESULT line), without
#: TensorFlow: what these tests check is the store's, and train_single.py's tracking is the first test's.
EPOCHS = (
    "import argparse, sys; from utils import tracking\n"
    "run = tracking.start(argparse.Namespace(width=1), world_size=1, logs=True, kind='single')\n"
    "for epoch in range(1, int(sys.argv[1]) + 1):\n"
    "    run.epoch(epoch, {'loss': 1.0 / epoch, 'val_loss': 1.0 / epoch})\n"
    "    print(f'epoch {epoch}/{sys.argv[1]}', flush=True)\n"
    "print('RESULT {}'); run.end(True)\n"
)


def test_a_store_that_cannot_be_written_costs_no_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = {**os.environ, tracking.URI_ENV: f"sqlite:///{blocker}/mlflow.db", tracking.EXPERIMENT_ENV: "x"}
    out = subprocess.run(
        [sys.executable, "-c", EPOCHS, "2"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=paths.REPO_ROOT,
    )
    assert "TRACKING off: cannot write to sqlite:///" in out.stdout and "training goes on" in out.stdout
    assert out.returncode == 0 and "epoch 2/2" in out.stdout and "RESULT " in out.stdout, out.stdout + out.stderr


def test_a_run_killed_mid_way_is_marked_failed_and_the_store_stays_usable(tmp_path):
    store = tmp_path / "mlflow.db"
    env = {**os.environ, **tracking.environment("killed", store)}
    # epochs logged back to back: the kill lands among its writes to the store
    proc = subprocess.Popen(
        [sys.executable, "-c", EPOCHS, "1000"], stdout=subprocess.PIPE, text=True, env=env, cwd=paths.REPO_ROOT
    )
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            if line.startswith("epoch 3/") or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGKILL)  # a lost machine: no chance to end its run
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    table = tracking.runs(store)  # the reader finds the process gone
    assert table.iloc[0].status == "FAILED", table
    out, statuses = _run_tracked(EPOCHS, store, "killed", "2")  # the next run writes to the same store
    assert out.returncode == 0, out.stderr[-2000:]
    assert sorted(statuses) == ["FAILED", "FINISHED"]


def _run_tracked(source: str, store, name: str, *args) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run `source` as a tracked script with `store` as its MLflow store; its result and the store's statuses."""
    out = subprocess.run(
        [sys.executable, "-c", source, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **tracking.environment(name, store)},
        cwd=paths.REPO_ROOT,
    )
    import sqlite3

    with sqlite3.connect(store) as db:  # as stored, before any reader could reconcile it
        return out, [s for (s,) in db.execute("select status from runs")]


def test_a_script_that_raises_ends_its_run_failed(tmp_path):
    store = tmp_path / "mlflow.db"
    code = (
        "import argparse; from utils import tracking\n"
        "run = tracking.start(argparse.Namespace(width=1), world_size=1, logs=True, kind='single')\n"
        "raise RuntimeError('broken on purpose')\n"
    )
    out, statuses = _run_tracked(code, store, "raises")
    assert out.returncode == 1 and "broken on purpose" in out.stderr
    assert statuses == ["FAILED"]


def test_the_arn_check_is_the_one_sagemaker_applies_to_a_training_jobs_mlflow_resource():
    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("MlflowConfig")
    assert shape.members["MlflowResourceArn"].metadata["pattern"] == tracking.ARN_PATTERN
    good = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/course"
    assert tracking.check_arn(good) == good
    for bad in ("sqlite:///x.db", "arn:aws:sagemaker:us-east-1:12345:mlflow-tracking-server/x", ""):
        with pytest.raises(ValueError, match="list-mlflow-tracking-servers"):
            tracking.check_arn(bad)


def test_experiment_names_are_checked_and_a_missing_store_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="experiment name"):
        tracking.environment("bad\nname", tmp_path / "x.db")
    with pytest.raises(FileNotFoundError, match="no tracking store"):
        tracking.runs(tmp_path / "none.db")


def test_the_ui_answers_a_proxys_host_name_only_and_chromium_sees_the_runs(tmp_path, monkeypatch):
    """MLflow 3 refuses a request addressed to a host name it was not given (DNS rebinding); a notebook instance's
    proxy forwards the instance's name, which `allowed_host` admits; MLflow's own page, served by tracking.UI, shows
    a tracked run's name in the browser (one server for all three: each start costs seconds). The server leaves
    nothing in the temporary folder (MLflow's server makes an empty db_init_lock-<hash> there for each store whose
    jobs the page asks for)."""
    import json
    import shutil
    import tempfile
    import urllib.error
    import urllib.request

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))  # this process's and the server's temporary folder
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    store = tmp_path / "mlflow.db"
    # the run as the scripts log it (tracking.Run), without a training: the scripts' own runs are the tests above
    log_one = "from utils import tracking; r = tracking.Run({}, world_size=1, logs=True, kind='single'); r.end(True)"
    env = {**os.environ, **tracking.environment("ui check", store), tracking.RUN_NAME_ENV: "seen-in-the-browser"}
    out = subprocess.run(
        [sys.executable, "-c", log_one], env=env, cwd=paths.REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "TRACKING run " in out.stdout, out.stdout + out.stderr  # not "TRACKING off"
    proxy = "course.notebook.us-east-1.sagemaker.aws"

    def status(ui, host):
        request = urllib.request.Request(
            ui.url + "ajax-api/2.0/mlflow/experiments/search",
            json.dumps({"max_results": 10}).encode(),
            {"Content-Type": "application/json", "Host": host, "Origin": f"https://{host}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status
        except urllib.error.HTTPError as err:
            return err.code

    browser_here = any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome"))
    with tracking.UI(store, allowed_host=proxy) as ui:
        assert ui.run_names() == ["seen-in-the-browser"]  # addressed to 127.0.0.1
        assert status(ui, proxy) == 200
        assert status(ui, "other.notebook.us-east-1.sagemaker.aws") == 403, "the host check is off"
        jobs = urllib.request.Request(ui.url + "ajax-api/3.0/jobs/search", b"{}", {"Content-Type": "application/json"})
        with urllib.request.urlopen(jobs, timeout=30) as answer:  # as the page asks: MLflow's job store opens
            assert json.loads(answer.read()) == {"jobs": []}
        if browser_here:
            _open_the_page(ui)
    assert ui.proc is None
    assert not list(temporary.rglob("db_init_lock-*")), "MLflow's lock file was left in the temporary folder"
    if not browser_here:
        pytest.skip("no Chromium here (sudo apt-get install -y chromium): the page was not opened")


def _open_the_page(ui) -> None:
    sys.path.insert(0, str(paths.TOOLS))
    import check_site
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # the test's own TMPDIR is too deep for Chromium's socket (Unix sockets take 108 characters): the test run's
        # own temporary folder (tools/run_tmpdir.sh), else the system's
        env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
        if os.environ.get("COURSE_RUN_TMPDIR"):
            env["TMPDIR"] = os.environ["COURSE_RUN_TMPDIR"]
        browser = pw.chromium.launch(executable_path=check_site.chromium(), args=check_site.CHROMIUM_FLAGS, env=env)
        try:
            page = browser.new_page()
            page.set_default_timeout(90_000)  # MLflow's UI is megabytes of JavaScript: 30 s is short on a busy machine
            page.goto(ui.url + "#/experiments")  # the page polls the server: "networkidle" never comes
            page.get_by_text("Model training").first.click(timeout=60_000)  # MLflow 3's page opens on GenAI
            page.get_by_text("ui check").first.click(timeout=60_000)
            page.get_by_text("seen-in-the-browser").first.wait_for(timeout=60_000)
            if os.environ.get("COURSE_SCREENSHOTS"):
                page.screenshot(path=os.environ["COURSE_SCREENSHOTS"])
        finally:
            browser.close()


LOCKED_BY_ITSELF = """
import argparse, os, signal, sqlite3, sys, time
from utils import tracking
run = tracking.start(argparse.Namespace(width=1), world_size=1, logs=True, kind="single")


class Collected:
    def __del__(self):  # as a garbage collector's callback runs: whatever it raises is printed and dropped
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs in here, with the store's lock held
        sum(range(1000))


db = sqlite3.connect(sys.argv[1], timeout=0)
try:
    db.execute("BEGIN IMMEDIATE")  # this process's own write holds the store's lock, as log_metrics does mid-write
    print("holding the lock", flush=True)
    Collected()  # dropped at once
    sum(range(1000))
finally:
    db.rollback()
    db.close()
print("the write is over", flush=True)
time.sleep(60)  # the training going on: the signal ends it once the run's end is written
print("not reached", flush=True)
"""


def test_sigterm_during_the_processs_own_write_ends_the_run_failed_after_that_write(tmp_path):
    """The signal lands while the process's own write holds the store's lock (SIGTERM during an epoch's metrics), and
    inside a callback that drops what it raises (CI saw it land in JAX's garbage-collector callback): the handler can
    neither write the end nor unwind the write, so the run is ended FAILED once that write is over, and the signal then
    ends the process."""
    out, statuses = _run_tracked(LOCKED_BY_ITSELF, tmp_path / "mlflow.db", "locked", str(tmp_path / "mlflow.db"))
    assert out.returncode == -signal.SIGTERM, out.stdout + out.stderr
    assert "the write is over" in out.stdout and "not reached" not in out.stdout, out.stdout + out.stderr
    assert statuses == ["FAILED"], out.stdout + out.stderr


ENDS_BEFORE_THE_THREAD = """
import argparse, os, signal, threading
from utils import tracking
threading.Thread.start = lambda self: None  # the thread that ends a stopped run never gets to run
run = tracking.start(argparse.Namespace(width=1), world_size=1, logs=True, kind="single")
os.kill(os.getpid(), signal.SIGTERM)
print("the script ends", flush=True)  # without its own end: MLflow's exit hook would say FINISHED
"""


def test_a_script_that_ends_before_the_stopping_thread_ends_its_run_failed_and_by_the_signal(tmp_path):
    out, statuses = _run_tracked(ENDS_BEFORE_THE_THREAD, tmp_path / "mlflow.db", "ending")
    assert out.returncode == -signal.SIGTERM, out.stdout + out.stderr
    assert statuses == ["FAILED"], out.stdout + out.stderr


FORKED = """
import argparse, os, signal, sys, time
from utils import tracking
run = tracking.start(argparse.Namespace(width=1), world_size=1, logs=True, kind="single")
ready_read, ready_write = os.pipe()
child = os.fork()
if child == 0:
    os.write(ready_write, b"1")  # past the fork's own set-up, which drops a signal that came during it
    time.sleep(60)
    os._exit(0)
os.read(ready_read, 1)
os.kill(child, signal.SIGTERM)
_, status = os.waitpid(child, 0)
print("child", os.waitstatus_to_exitcode(status), flush=True)
run.end(ok=True)
"""


def test_a_forked_child_stopped_by_sigterm_ends_by_it_and_leaves_its_parents_run_alone(tmp_path):
    out, statuses = _run_tracked(FORKED, tmp_path / "mlflow.db", "forked")
    assert out.returncode == 0 and f"child {-signal.SIGTERM}" in out.stdout, out.stdout + out.stderr
    assert statuses == ["FINISHED"], out.stdout + out.stderr


def test_a_run_stopped_with_sigterm_ends_failed_at_once(tmp_path):
    """SIGTERM is what StopTrainingJob, a spot reclaim and the course's launcher send first: the run ends FAILED
    before the process does, with no reader needed."""
    store = tmp_path / "mlflow.db"
    env = {**os.environ, **tracking.environment("stopped", store), "PYTHONUNBUFFERED": "1"}
    args = [*TINY[:-3], "5", "--data-size", "20000"]
    proc = subprocess.Popen(
        [sys.executable, str(paths.SCRIPTS / "train_single.py"), *args], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        for line in proc.stdout:
            if line.startswith("epoch 1/"):
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM, "it still ends as a SIGTERM ends a process"
    finally:
        if proc.poll() is None:
            proc.kill()
    import sqlite3

    with sqlite3.connect(store) as db:  # read as stored, before any reader could reconcile it
        assert [s for (s,) in db.execute("select status from runs")] == ["FAILED"]


def test_a_tracked_job_request_carries_the_arn_and_installs_mlflows_client():
    from utils import sagemaker_job as sj

    arn = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/app-course"
    cfg = sj.JobConfig(kind="mwms", instances=2, mlflow_arn=arn, mlflow_experiment="jobs")
    with sj.offline_aws() as aws:
        request = sj.request_for(cfg, aws)
        assert request["Environment"][tracking.URI_ENV] == arn
        assert request["Environment"]["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "1"
        assert aws.read_uploaded(request, "code", "requirements.txt").split() == list(tracking.JOB_REQUIREMENTS)
        with pytest.raises(ValueError, match="EnableNetworkIsolation"):
            sj.validate({**request, "EnableNetworkIsolation": True})
        with pytest.raises(ValueError, match="MLFLOW_TRACKING_URI: not the ARN"):
            sj.validate({**request, "Environment": {tracking.URI_ENV: "http://127.0.0.1:5000"}})
    with pytest.raises(ValueError, match="network isolation"):
        sj.JobConfig(kind="mwms", instances=2, mlflow_arn=arn, network_isolation=True)


def test_the_local_store_runs_this_environments_mlflow():
    from importlib.metadata import version

    assert version("mlflow") == tracking.MLFLOW_VERSION


def test_a_job_installs_the_client_aws_pairs_with_its_server_whole_at_one_version():
    """AWS's TensorFlow image has the full mlflow (3.14.0), whose three packages write one mlflow/ folder: one left at
    the image's version would mix two versions' files; and the client is the one AWS pairs with the server, never
    the local store's."""
    assert tracking.job_requirements("3.0.1") == (
        "mlflow==3.0.0",
        "mlflow-skinny==3.0.0",
        "mlflow-tracing==3.0.0",
        tracking.PLUGIN,
    )
    assert tracking.paired_client("2.13.0") == "2.13.2"
    with pytest.raises(ValueError, match=r"mlflow==2.16.2, which cannot be installed whole .* Ask for a 3.0.x server"):
        tracking.job_requirements("2.16")
    with pytest.raises(ValueError, match=r"AWS pairs no MLflow client with a tracking server 3.17.2 .*2.13.x"):
        tracking.job_requirements(tracking.MLFLOW_VERSION)


def test_a_job_logging_to_a_server_of_another_version_installs_that_servers_client():
    from utils import sagemaker_job as sj

    arn = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/course"
    cfg = sj.JobConfig(kind="mwms", instances=2, mlflow_arn=arn, mlflow_version="3.0.1")
    with sj.offline_aws() as aws:
        request = sj.request_for(cfg, aws)
        assert aws.read_uploaded(request, "code", "requirements.txt").split() == list(tracking.job_requirements("3.0"))
    for refused in ("3.17.2", "2.16.2"):
        with pytest.raises(ValueError, match="AWS pairs no MLflow client|cannot be installed whole"):
            sj.JobConfig(kind="mwms", instances=2, mlflow_arn=arn, mlflow_version=refused)


def test_making_a_fresh_store_says_nothing_on_stderr(tmp_path):
    """Lesson 04 makes the store in the learner's notebook: MLflow's and Alembic's INFO lines would show there
    as stderr (the JupyterLab check refuses them)."""
    code = f"from utils import tracking; tracking.environment('quiet', {str(tmp_path / 'mlflow.db')!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=paths.REPO_ROOT)
    assert out.returncode == 0, out.stderr[-1500:]
    assert out.stderr.strip() == "", out.stderr


# --- a damaged store, and stores made by several runs at once

#: What a store's file can suffer: emptied (truncated to 0 bytes), pages overwritten where MLflow's own queries do
#: not look (only SQLite's check finds them), overwritten from its second page on (SQLite's raw "database disk
#: image is malformed"), its header overwritten (SQLite's "file is not a database").
DAMAGE = {
    "empty": lambda good: b"",
    "latent": lambda good: good[:8192] + b"\xff" * 8192 + good[16384:],
    "pages": lambda good: good[:4096] + b"\xff" * (len(good) - 4096),
    "header": lambda good: b"not SQLite" * 10 + good[100:],
}


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> bytes:
    """The bytes of a store holding one finished run (each test damages a copy, at a path never opened before)."""
    from mlflow.tracking import MlflowClient

    store = tmp_path_factory.mktemp("good") / "mlflow.db"
    env = tracking.environment("damaged", store)
    client = MlflowClient(env[tracking.URI_ENV])
    run = client.create_run(client.get_experiment_by_name("damaged").experiment_id, run_name="kept")
    client.log_metric(run.info.run_id, "loss", 0.5, step=1)
    client.set_terminated(run.info.run_id, "FINISHED")
    return store.read_bytes()


def _damaged(folder, good: bytes, how: str):
    store = folder / how / "mlflow.db"
    store.parent.mkdir()
    store.write_bytes(DAMAGE[how](good))
    return store


def _says_damaged(err: BaseException, store) -> None:
    message = str(err)
    assert type(err).__name__ == "DamagedStore", f"{type(err).__name__}: {message[:600]}"
    assert "\n" not in message and str(store) in message and "move it aside" in message, message
    assert "the runs in it are lost" in message, message


def _start_and_stop_the_ui(store) -> None:
    with tracking.UI(store, timeout=60):
        pass


def test_a_damaged_store_is_named_with_what_to_do_when_read_made_or_shown(tmp_path, good_store):
    """A store emptied or corrupted is neither taken for a new one (its runs gone without a word) nor answered
    with SQLite's raw error: the course says which file, what is wrong and what to do, and leaves the file as
    it was; the UI says it before starting a server."""
    for how in DAMAGE:
        store = _damaged(tmp_path, good_store, how)
        before = store.read_bytes()
        calls = [
            (tracking.runs, store),
            (tracking.history, "0" * 32, "loss", store),
            (tracking.environment, "damaged", store),
        ]
        if how != "latent":  # each costs a server's start where the store is not checked first
            calls.append((_start_and_stop_the_ui, store))
        for call, *args in calls:
            with pytest.raises(Exception) as caught:
                call(*args)
            _says_damaged(caught.value, store)
        assert store.read_bytes() == before, f"{how}: the damaged store was written to"
        assert not (store.parent / "ui.log").exists() or how == "latent", "a server was started on it"


def test_a_damaged_store_turns_tracking_off_in_one_line_and_the_training_goes_on(tmp_path, good_store):
    stores = [_damaged(tmp_path, good_store, how) for how in ("empty", "pages")]
    code = (
        "import os, sys; from utils import tracking\n"
        "for store in sys.argv[1:]:\n"
        "    os.environ[tracking.URI_ENV] = tracking.local_uri(store)\n"
        "    tracking.Run({}, world_size=1, logs=True, kind='single').end(True)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, stores)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, tracking.EXPERIMENT_ENV: "damaged"},
        cwd=paths.REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == len(stores), out.stdout
    for line, store in zip(lines, stores):
        assert line.startswith("TRACKING off: ") and line.endswith("training goes on"), line
        assert str(store) in line and "is damaged" in line and "move it aside" in line, line
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert stores[0].stat().st_size == 0, "the emptied store was taken for a new one"


def test_runs_that_make_a_fresh_store_at_once_are_all_tracked(tmp_path):
    """Without tracking.environment() first (a script started by hand, several at once), the first runs make the
    store and its experiment together: each must still be tracked, none turned off by another's half-made store."""
    store, count = tmp_path / "mlflow.db", 3
    code = (
        "import pathlib, sys, time\n"
        "import mlflow, mlflow.store.tracking.sqlalchemy_store\n"
        "from utils import tracking\n"
        "folder = pathlib.Path(sys.argv[1]); (folder / f'ready-{sys.argv[2]}').touch()\n"
        "while not (folder / 'go').exists(): time.sleep(0.002)\n"
        "tracking.Run({}, world_size=1, logs=True, kind='single').end(True)\n"
    )
    env = {**os.environ, tracking.URI_ENV: tracking.local_uri(store), tracking.EXPERIMENT_ENV: "at once"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=paths.REPO_ROOT,
        )
        for i in range(count)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("ready-*"))) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        (tmp_path / "go").touch()  # all of them at once, their imports done
        outs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for stdout, stderr in outs:
        assert "TRACKING run " in stdout, stdout + stderr[-1500:]
    table = tracking.runs(store)
    assert list(table.status) == ["FINISHED"] * count and set(table.experiment) == {"at once"}
    from mlflow.tracking import MlflowClient  # as tracking.environment() makes it: files beside the store

    experiment = MlflowClient(tracking.local_uri(store)).get_experiment_by_name("at once")
    assert experiment.artifact_location == (store.parent / "artifacts").as_uri()
