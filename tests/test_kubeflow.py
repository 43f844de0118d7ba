"""utils.kubeflow: manifests built with the SDKs, the operators' admission rules, and what the operators give
every pod, against the operator's own test cases where it has them (TF_CONFIG, the TFJob webhook) and otherwise against
values worked out by hand from the operators' sources (kubeflow/trainer v1.9.4,
kubeflow/mpi-operator v0.8.0, rules unchanged in v0.8.2). The jobs rehearsed on lab hosts named as their pods (a TFJob whose killed worker
is restarted and resumes; an MPIJob whose mpirun reaches the worker pods through the hostfile) are asserted where
lesson 09 runs them, which CI executes on the lab (test_mpirun_lab checks that CI can)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml

from utils import kubeflow as kf
from utils import launch, netlab

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/course:2.21"
MWMS = ["python", "/opt/course/scripts/train_mwms.py"]


def _job(**kw):
    return kf.tfjob("forecaster", workers=2, chief=1, image=IMAGE, command=MWMS, args=["--epochs", "3"], **kw)


def test_tfjob_is_built_by_the_sdk_and_round_trips_through_yaml():
    job = _job(namespace="team-a")
    text = kf.to_yaml(job)
    data = yaml.safe_load(text)
    assert data["apiVersion"] == "kubeflow.org/v1" and data["kind"] == "TFJob"
    assert data["metadata"] == {"name": "forecaster", "namespace": "team-a"}
    specs = data["spec"]["tfReplicaSpecs"]
    assert {k: (v["replicas"], v["restartPolicy"]) for k, v in specs.items()} == {
        "Chief": (1, "OnFailure"),
        "Worker": (2, "OnFailure"),
    }
    container = specs["Worker"]["template"]["spec"]["containers"][0]
    assert container["name"] == "tensorflow" and container["image"] == IMAGE
    # the program goes in args: a `command` would replace the image's ENTRYPOINT (AWS's entrypoint.sh)
    assert "command" not in container and container["args"] == MWMS + ["--epochs", "3"]
    again = kf.load_tfjob(text)  # through the SDK's models again
    assert kf.manifest(again) == kf.manifest(job)


def test_tf_config_of_every_replica_as_the_operator_writes_it():
    """genTFConfigJSONStr: Go's json.Marshal of {cluster, task, environment}; cluster keys sorted; hosts are
    <job>-<type>-<i>.<namespace>.svc:2222."""
    pods = kf.tf_pods(_job(namespace="team-a"))
    assert [p.name for p in pods] == ["forecaster-chief-0", "forecaster-worker-0", "forecaster-worker-1"]
    expected_cluster = (
        '{"chief":["forecaster-chief-0.team-a.svc:2222"],'
        '"worker":["forecaster-worker-0.team-a.svc:2222","forecaster-worker-1.team-a.svc:2222"]}'
    )
    assert pods[2].env["TF_CONFIG"] == (
        '{"cluster":' + expected_cluster + ',"task":{"type":"worker","index":1},"environment":"cloud"}'
    )
    assert json.loads(pods[0].env["TF_CONFIG"])["task"] == {"type": "chief", "index": 0}
    assert pods[1].dns == ["forecaster-worker-0.team-a.svc", "forecaster-worker-0.team-a.svc.cluster.local"]
    assert all(p.restart_policy == "OnFailure" for p in pods)


def test_port_named_tfjob_port_and_a_single_replica():
    m = kf.manifest(_job())
    for spec in m["spec"]["tfReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["ports"] = [{"name": "tfjob-port", "containerPort": 3333}]
    assert json.loads(kf.tf_config(m, "Worker", 0))["cluster"]["chief"] == ["forecaster-chief-0.default.svc:3333"]
    single = kf.manifest(kf.tfjob("one", workers=1, image=IMAGE, command=MWMS))
    assert kf.tf_config(single, "Worker", 0) is None  # isDistributed: one replica in all
    assert "TF_CONFIG" not in kf.tf_pods(single)[0].env


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: m["metadata"].update(name="Forecaster_1"), "should match a DNS-1035 label"),
        (lambda m: m["spec"].pop("tfReplicaSpecs"), "spec.tfReplicaSpecs: Required value: must be required"),
        (
            lambda m: m["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(name="tf"),
            "must have at least one container with name tensorflow",
        ),
        (
            lambda m: m["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].pop("image"),
            "containers[0].image: Required value: must be required",
        ),
        (
            lambda m: m["spec"]["tfReplicaSpecs"].update(Master=m["spec"]["tfReplicaSpecs"]["Chief"]),
            "must not have more than 1 Chief or Master role",
        ),
        (lambda m: m["spec"]["tfReplicaSpecs"]["Chief"].update(replicas=2), "at most one chief task"),
        (lambda m: m["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=0), "creates no pod"),
        (lambda m: m["spec"]["tfReplicaSpecs"].update(PS=m["spec"]["tfReplicaSpecs"]["Chief"]), "no ps task"),
        (
            lambda m: m["spec"]["tfReplicaSpecs"]["Worker"].update(restartPolicy="Sometimes"),
            "the API server refuses them: no pod would be created",
        ),
        (lambda m: m["spec"]["runPolicy"].update(backoffLimit=-1), "fails the job at its first sync"),
        (lambda m: m["spec"]["runPolicy"].update(backoffLimit="three"), "backoffLimit: Invalid value: 'three'"),
    ],
)
def test_bad_tfjobs_are_refused_with_the_operators_message(change, message):
    m = copy.deepcopy(kf.manifest(_job()))
    change(m)
    with pytest.raises(kf.ManifestError, match=re.escape(message)):
        kf.check_tfjob(m)
    assert kf.check_tfjob(_job()) == []  # the unchanged job passes


def test_wrong_field_types_fail_in_the_sdk_models():
    m = kf.manifest(_job())
    m["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(kf.ManifestError, match="wrong type"):
        kf.load_tfjob(m)
    with pytest.raises(kf.ManifestError, match="expected TFJob"):
        kf.load_tfjob({"kind": "PyTorchJob"})
    # the CRD requires only spec.tfReplicaSpecs: a TFJob without runPolicy is accepted, as the API server accepts it
    del m["spec"]["runPolicy"]
    m["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    assert kf.load_tfjob(m).spec.tf_replica_specs["Worker"].replicas == 2


def _mpi(**kw):
    line = [
        "mpirun",
        "--allow-run-as-root",
        *kf.MPI_FORWARD,
        "-np",
        "4",
        "python",
        "/opt/course/scripts/train_horovod.py",
    ]
    return kf.mpijob("hvd", workers=2, slots_per_worker=2, image=IMAGE, command=line, **kw)


def test_mpijob_hostfile_launcher_variables_and_pods():
    job = _mpi(namespace="team-a")
    assert kf.mpi_hostfile(job) == "hvd-worker-0.hvd.team-a.svc slots=2\nhvd-worker-1.hvd.team-a.svc slots=2\n"
    env = kf.mpi_launcher_env(job)
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true" and env["OMPI_MCA_orte_set_default_slots"] == "2"
    assert env["OMPI_MCA_plm_rsh_args"] == "-o ConnectionAttempts=10"
    launcher, *workers = kf.mpi_pods(job)
    assert launcher.name == "hvd-launcher" and launcher.files == {"/etc/mpi/hostfile": kf.mpi_hostfile(job)}
    assert [w.name for w in workers] == ["hvd-worker-0", "hvd-worker-1"]
    assert all(w.command == ["/usr/sbin/sshd", "-De"] and w.env["K_MPI_JOB_ROLE"] == "worker" for w in workers)
    assert launcher.command[0] == "mpirun"
    for rtype in ("Launcher", "Worker"):  # args keep the image's ENTRYPOINT; the operator leaves args alone
        container = job["spec"]["mpiReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]
        assert "command" not in container and container["args"], rtype
    assert workers[1].dns[0] == "hvd-worker-1.hvd.team-a.svc"
    data = yaml.safe_load(kf.to_yaml(job))
    assert data["apiVersion"] == "kubeflow.org/v2beta1" and data["spec"]["sshAuthMountPath"] == "/root/.ssh"


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["mpiReplicaSpecs"].pop("Launcher"), "must have Launcher replica spec"),
        (lambda s: s["mpiReplicaSpecs"]["Launcher"].update(replicas=2), "Launcher].replicas: Invalid value: must be 1"),
        (lambda s: s["mpiReplicaSpecs"]["Worker"].update(replicas=0), "must be greater than or equal to 1"),
        (lambda s: s.update(slotsPerWorker=-1), "slotsPerWorker: Invalid value: -1"),
        (lambda s: s.update(mpiImplementation="MVAPICH"), 'Unsupported value: "MVAPICH"'),
        (lambda s: s["runPolicy"].update(cleanPodPolicy="Sometimes"), 'Unsupported value: "Sometimes"'),
        (
            lambda s: s["runPolicy"].update(backoffLimit=-1),
            "spec.runPolicy.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            lambda s: s["mpiReplicaSpecs"]["Worker"].update(restartPolicy="Always"),
            'supported values: "Never", "OnFailure"',
        ),
    ],
)
def test_bad_mpijobs_are_refused_with_the_operators_message(change, message):
    m = copy.deepcopy(_mpi())
    change(m["spec"])
    with pytest.raises(kf.ManifestError, match=re.escape(message)):
        kf.check_mpijob(m)
    assert kf.check_mpijob(_mpi()) == []


def test_mpijob_defaults_are_applied_before_validation():
    """default.go fills what a user leaves out; the controller validates after that, so these are accepted."""
    m = copy.deepcopy(_mpi())
    for key in ("slotsPerWorker", "sshAuthMountPath", "mpiImplementation"):
        m["spec"].pop(key)
    m["spec"]["runPolicy"].pop("cleanPodPolicy")
    m["spec"]["mpiReplicaSpecs"]["Worker"].pop("restartPolicy")
    assert kf.check_mpijob(m) == []
    filled = kf.mpijob_defaults(m)["spec"]
    assert (filled["slotsPerWorker"], filled["sshAuthMountPath"], filled["mpiImplementation"]) == (
        1,
        "/root/.ssh",
        "OpenMPI",
    )
    assert (
        filled["runPolicy"]["cleanPodPolicy"] == "None"
        and filled["mpiReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"
    )
    assert kf.mpi_hostfile(m).endswith("slots=1\n")


def test_the_played_kubelet_restarts_on_failure_only(tmp_path):
    """OnFailure: a container that exits non-zero runs again (here it fails once, then succeeds); Never: not."""
    marker = tmp_path / "failed-once"
    program = (
        f"import pathlib, sys; p = pathlib.Path({str(marker)!r}); ok = p.exists(); p.touch(); sys.exit(0 if ok else 3)"
    )
    for policy, codes in (("OnFailure", [3, 0]), ("Never", [3])):
        marker.unlink(missing_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "utils.kubeflow", "_kubelet", policy, "3", "--", sys.executable, "-c", program],
            capture_output=True,
            text=True,
            timeout=60,
        )
        pod = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("POD ")][-1][4:])
        assert pod["exit_codes"] == codes and done.returncode == codes[-1]


# ---- rehearsed on loopback (on the lab, lesson 09 runs them) ------------------------------------------------------

SHORT = ["--data-size", "3000", "--width", "32"]


def test_tfjob_on_loopback_where_the_lab_cannot_run(tmp_path, monkeypatch):
    """The labelled stand-in: pods as local processes, service names as 127.0.0.1 with a port each, /opt/course
    as this repository, the claim as its folder; the same TF_CONFIG otherwise, and the same training. It makes
    no folder for a claim given as a volume."""
    args = ["--epochs", "1", "--checkpoint-dir", kf.CHECKPOINTS, *SHORT]
    job = kf.tfjob("fc", workers=1, chief=1, image=IMAGE, command=MWMS, args=args, checkpoints="ckpt")
    claim, scratch = tmp_path / "claim", tmp_path / "tmp"
    claim.mkdir()
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    run = kf.rehearse(kf.tf_pods(job), where="loopback", volumes={"ckpt": claim}, timeout=300, stream=False)
    assert run.where == "loopback" and run.why_loopback == "asked for"
    assert run.exit_codes == {"fc-chief-0": [0], "fc-worker-0": [0]}, "\n".join(
        f"--- {pod} ---\n{text[-4000:]}" for pod, text in run.output.items()
    )
    assert list(scratch.iterdir()) == [], "a folder was made for a claim given as a volume"
    records = run.records()
    assert [r["rank"] for r in records] == [0, 1] and len({r["weights_sha256"] for r in records}) == 1
    assert json.loads((claim / "state.json").read_text())["epoch"] == 1
    with pytest.raises(netlab.LabError, match="sshd on its worker hosts"):
        kf.rehearse(kf.mpi_pods(_mpi()), where="loopback")


def test_on_loopback_a_claim_without_a_volume_is_a_folder_both_pods_share_for_the_run_only(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    write = ["sh", "-c", "test -d /data && echo hello > /data/note && echo FOLDER $(cd /data && pwd)"]
    read = ["sh", "-c", "until test -s /data/note; do sleep 0.1; done; cat /data/note"]
    pods = [
        kf.Pod(
            name=f"p-{i}",
            replica_type="Worker",
            index=i,
            dns=[f"p-{i}.p.default.svc"],
            command=command,
            env={},
            restart_policy="Never",
            claims={"/data": "shared"},
        )
        for i, command in enumerate([write, read])
    ]
    run = kf.rehearse(pods, where="loopback", timeout=60, stream=False)
    assert run.exit_codes == {"p-0": [0], "p-1": [0]}, run.output
    assert "hello" in run.output["p-1"]
    folder = Path(re.search(r"FOLDER (\S+)", run.output["p-0"]).group(1))
    assert folder.parent.parent == scratch, folder  # the claim's folder was made for the run, in the temporary folder
    assert list(scratch.iterdir()) == [], "the claim's folder outlived the run"


# ---- the played operator: restartPolicy ExitCode and runPolicy.backoffLimit (no TensorFlow: plain programs) -----

# A pod's program that fails once (with `how`), then runs again for `then` seconds and succeeds; argv[1] is a folder
# that remembers, per TF_CONFIG task, that the first run happened. With argv[4] = n, a second run waits (a minute at
# most) until n tasks have made their first run before its `then` seconds: the played pods start seconds apart on a
# busy machine, and one pod's second run must not end before the other has failed once.
ONCE = """
import json, os, pathlib, signal, sys, time
task = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]
mark = pathlib.Path(sys.argv[1]) / f"ran-{task}"
if not mark.exists():
    mark.touch()
    os.kill(os.getpid(), signal.SIGKILL) if sys.argv[2] == "kill" else sys.exit(int(sys.argv[2]))
deadline = time.monotonic() + 60
while len(list(mark.parent.glob("ran-*"))) < int(sys.argv[4] if len(sys.argv) > 4 else 1) and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(float(sys.argv[3]))
"""


def _plain_tfjob(name, program, args, *, workers=1, restart_policy="OnFailure", run_policy=None):
    job = kf.tfjob(
        name,
        workers=workers,
        image=IMAGE,
        command=["python", "-c", program],
        args=[str(a) for a in args],
        restart_policy=restart_policy,
    )
    m = kf.manifest(job)
    m["spec"]["runPolicy"] = dict(run_policy or {})
    return m


def _loopback(pods, **kw):
    return kf.rehearse(pods, where="loopback", timeout=60, stream=False, **kw)


def test_exit_code_policy_creates_the_pod_again_after_a_signal(tmp_path):
    """restartPolicy ExitCode (kubeflow/trainer v1.9.4): 128 and above is retryable, so a SIGKILLed container
    (137) gets its pod created again."""
    job = _plain_tfjob("ec", ONCE, [tmp_path, "kill", 0], restart_policy="ExitCode")
    run = _loopback(kf.tf_pods(job))
    assert run.exit_codes == {"ec-worker-0": [137, 0]}, run.output
    assert any("ExitCode" in note for note in kf.check_tfjob(job))


def test_exit_code_policy_fails_the_job_on_an_exit_code_below_128(tmp_path):
    """1-127 is permanent: the pod is not restarted and the operator marks the job Failed (pod.go ReconcilePods)."""
    job = _plain_tfjob("ec", ONCE, [tmp_path, 3, 0], restart_policy="ExitCode")
    with pytest.raises(
        launch.WorkerError, match=re.escape('job "ec" is failing because "Worker" replica(s) failed.')
    ) as e:
        _loopback(kf.tf_pods(job))
    assert e.value.exit_codes == {"ec-worker-0": [3]}
    assert e.value.job_failed["reason"] == "TFJobFailed"


def test_backoff_limit_counts_the_restarts_of_every_pod_of_the_job(tmp_path):
    """Each of two workers fails once (one restart per pod, two in the job). backoffLimit 2 is reached by their sum
    (PastBackoffLimit: restartCount summed over the job's running pods, >= the limit): the job fails, and
    cleanPodPolicy Running deletes its running pods."""
    job = _plain_tfjob(
        "cross", ONCE, [tmp_path, 3, 4, 2], workers=2, run_policy={"backoffLimit": 2, "cleanPodPolicy": "Running"}
    )
    message = "Job cross has failed because it has reached the specified backoff limit"
    with pytest.raises(launch.WorkerError, match=re.escape(message)) as e:
        _loopback(kf.tf_pods(job))
    assert e.value.job_failed == {"reason": "TFJobFailed", "message": message}
    codes = e.value.exit_codes
    assert set(codes) == {"cross-worker-0", "cross-worker-1"}, codes
    assert all(c[0] == 3 and 0 not in c and len(c) <= 2 for c in codes.values()), codes


def test_a_failed_jobs_running_pods_are_deleted(tmp_path):
    """backoffLimit 1: worker 0's first restart fails the job; cleanPodPolicy Running deletes worker 1, which is
    still running (SIGTERM: 143), and nothing of it is left."""
    marker = f"still-running-{uuid.uuid4().hex}"  # in worker 1's command line, to find it afterwards
    program = """
import json, os, pathlib, sys, time
up = pathlib.Path(sys.argv[2]) / "up"
if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
    up.touch()
    time.sleep(60)
while not up.exists():  # worker 0 fails once worker 1 runs
    time.sleep(0.05)
sys.exit(3)
"""
    run_policy = {"backoffLimit": 1, "cleanPodPolicy": "Running"}
    job = _plain_tfjob("del", program, [marker, tmp_path], workers=2, run_policy=run_policy)
    with pytest.raises(launch.WorkerError, match="reached the specified backoff limit") as e:
        _loopback(kf.tf_pods(job))
    assert e.value.exit_codes == {"del-worker-0": [3], "del-worker-1": [143]} and e.value.seconds < 30
    assert not [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]


def test_backoff_limit_with_clean_pod_policy_none_fails_the_job_and_leaves_its_pods(tmp_path):
    """The same job with cleanPodPolicy None (the TFJob's default): Failed all the same, but the operator deletes
    nothing (DeletePodsAndServices), so the kubelet restarts the containers and they finish."""
    job = _plain_tfjob("cross", ONCE, [tmp_path, 3, 4, 2], workers=2, run_policy={"backoffLimit": 2})
    run = _loopback(kf.tf_pods(job))
    assert run.exit_codes == {"cross-worker-0": [3, 0], "cross-worker-1": [3, 0]}, run.output
    assert run.job_failed["message"] == "Job cross has failed because it has reached the specified backoff limit"


def test_backoff_limit_unset_or_not_reached_leaves_the_job_running(tmp_path):
    job = _plain_tfjob("ok", ONCE, [tmp_path, 3, 0], workers=2, run_policy={"backoffLimit": 3})
    run = _loopback(kf.tf_pods(job))
    assert run.exit_codes == {"ok-worker-0": [3, 0], "ok-worker-1": [3, 0]} and run.job_failed is None


def test_mpijob_launcher_is_a_batch_job_with_the_run_policys_backoff_limit(tmp_path):
    """mpi-operator v0.8.0 newLauncherJob: the launcher is a batch/v1 Job with BackoffLimit runPolicy.backoffLimit,
    which the Job API defaults to 6; the Job fails with BackoffLimitExceeded when its pod's restarts reach it."""
    job = _mpi()
    job["spec"]["runPolicy"]["backoffLimit"] = 2
    launcher = kf.mpi_pods(job)[0]
    failing = kf.Pod(**{**launcher.__dict__, "command": ["python", "-c", "import sys; sys.exit(2)"]})
    with pytest.raises(launch.WorkerError, match="BackoffLimitExceeded") as e:
        _loopback([failing])
    assert e.value.exit_codes == {"hvd-launcher": [2, 2]}
    assert launcher.replica_type == "Launcher" and launcher.backoff_limit == 2
    assert kf.mpi_pods(_mpi())[0].backoff_limit == 6  # unset: the Job API's default


def test_nodes_are_removed_only_when_the_gap_between_runs_exceeds_the_scale_down_delay():
    """Cluster Autoscaler removes a node unneeded for 10 minutes (default): runs of 0.9 h every hour with 5 min of
    start-up leave 1 min idle, so the nodes stay and cost what nodes kept running cost; runs of 0.25 h leave 40."""
    full = kf.node_minutes(0.9, startup_minutes=5)
    assert full["idle"] == pytest.approx(1.0) and not full["removed"] and full["billed"] == 60
    short = kf.node_minutes(0.25, startup_minutes=5)
    assert short["removed"] and short["billed"] == pytest.approx(5 + 15 + 10)
    day = kf.engines(4, 0.9, startup_minutes=5, scale_down_minutes=10)["$ a day"]
    assert day.iloc[1] == pytest.approx(day.iloc[2])  # autoscaled = kept running for this shape
    # start-up is billed on SageMaker too (from TrainingStartTime, which counts the image and data download)
    assert day.iloc[0] == pytest.approx(kf.engines(4, 0.9, startup_minutes=0)["$ a day"].iloc[0] * (0.9 + 5 / 60) / 0.9)
    rows = kf.engines(4, 0.25, startup_minutes=5, autoscalers={"slow": 10, "fast": 1})["$ a day"]
    assert rows.iloc[2] < rows.iloc[1] < rows.iloc[3]  # a shorter delay bills less; both less than nodes kept
    day = kf.engines(4, 0.25, startup_minutes=5, scale_down_minutes=10)["$ a day"]
    assert day.iloc[1] < day.iloc[2]


def test_the_played_kubelet_records_when_each_run_ended(tmp_path):
    """The POD line carries one end time per run, after the run's start: what lesson 09 uses to time a failure."""
    import time

    marker = tmp_path / "failed-once"
    program = (
        f"import pathlib, sys; p = pathlib.Path({str(marker)!r}); ok = p.exists(); p.touch(); sys.exit(0 if ok else 3)"
    )
    start = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "utils.kubeflow", "_kubelet", "OnFailure", "3", "--", sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
    )
    pod = kf._pod_line(done.stdout)
    assert pod["exit_codes"] == [3, 0] and len(pod["ended"]) == 2
    assert start < pod["ended"][0] < pod["ended"][1] < time.time()


def test_a_streamed_rehearsal_says_what_it_starts_and_each_restart_in_words(tmp_path, capsys):
    once = ["sh", "-c", "test -f /data/once || { touch /data/once; exit 3; }; echo done"]
    pod = kf.Pod(
        name="p-0",
        replica_type="Worker",
        index=0,
        dns=["p-0.p.default.svc"],
        command=once,
        env={},
        restart_policy="OnFailure",
        claims={"/data": "shared"},
    )
    run = kf.rehearse([pod], where="loopback", volumes={"shared": tmp_path}, timeout=60, stream=True)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "pods as processes of this machine, on loopback (asked for): the played kubelet starts 1 container(s) now "
        "(p-0): each program imports TensorFlow and reads its data before its first epoch"
    )
    assert f"RESTART after exit code 3: the container starts again in {kf.BACKOFF:g} s (run 2)" in out, out
    assert run.exit_codes == {"p-0": [3, 0]}


def test_a_quiet_rehearsal_says_it_is_still_running(capsys):
    with kf._heartbeat(True, every=0.3) as shown:
        assert shown("epoch 1/2: loss 0.1")
        time.sleep(1.6)
    out = capsys.readouterr().out.splitlines()
    assert out and all(line.startswith("  ... ") and line.endswith("waiting for their next line") for line in out), out
    with kf._heartbeat(False) as shown:
        assert shown is False


#: Why an MPIJob cannot be rehearsed here ('' where it can): the lab as root, with Open MPI and OpenSSH.
MPI_LAB_WHY = (
    netlab.support().reason
    if netlab.support().kind != "root"
    else ", ".join(t for t in ("mpirun", "ssh", "ssh-keygen") if not __import__("shutil").which(t))
)
#: A rank that imports the course's code (found only through the image's PYTHONPATH: a script's own folder is the
#: first entry of sys.path, not the working folder) and a package of the image's Python, and says which Python it is.
RANK = "import sys\nimport portpicker, utils.job\nprint('RANK-PYTHON ' + sys.executable, flush=True)\n"


@pytest.mark.skipif(bool(MPI_LAB_WHY), reason=MPI_LAB_WHY or "the lab runs here")
def test_mpijob_ranks_on_worker_pods_get_only_what_mpirun_forwards(tmp_path):
    """Ranks that mpirun starts over ssh on the worker pods inherit none of the container's variables (neither the
    image's PATH, where its Python is, nor PYTHONPATH): sshd gives a session its own. mpi-operator's examples forward
    them with -x; a line without them fails on a cluster, and in the rehearsal."""
    (tmp_path / "rank.py").write_text(RANK)
    bare = ["mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "none", "python", str(tmp_path / "rank.py")]
    job = kf.mpijob("fwd", workers=2, slots_per_worker=1, image=IMAGE, command=bare, restart_policy="Never")
    with pytest.raises(launch.WorkerError):
        kf.rehearse(kf.mpi_pods(job), timeout=120, max_restarts=0, stream=False)
    forwarded = [*bare[:6], *kf.MPI_FORWARD, *bare[6:]]
    job = kf.mpijob("fwd", workers=2, slots_per_worker=1, image=IMAGE, command=forwarded, restart_policy="Never")
    run = kf.rehearse(kf.mpi_pods(job), timeout=120, max_restarts=0, stream=False)
    pythons = re.findall(r"RANK-PYTHON (\S+)", run.output["fwd-launcher"])
    assert pythons == [str(Path(sys.executable).parent / "python")] * 2, run.output["fwd-launcher"]


def test_gpu_images_without_a_gpu_request_are_flagged_and_the_jobs_request_their_gpus():
    """A pod gets a GPU only by requesting nvidia.com/gpu (the NVIDIA device plugin's extended resource); a pod of a
    GPU image without one trains on CPU or uses GPUs the scheduler does not count. mpi-operator's own example puts
    nvidia.com/gpu on the workers."""
    line = ["mpirun", *kf.MPI_FORWARD, "-np", "4", "python", "/opt/course/scripts/train_horovod.py"]
    bare_tf = kf.tfjob("f", workers=2, chief=1, image=kf.TF_IMAGE.name, command=MWMS)
    bare_mpi = kf.mpijob("h", workers=2, slots_per_worker=2, image=kf.HVD_IMAGE.name, command=line)
    assert any("nvidia.com/gpu" in note for note in kf.check_tfjob(bare_tf))
    assert any("nvidia.com/gpu" in note for note in kf.check_mpijob(bare_mpi))
    tf = kf.tfjob("f", workers=2, chief=1, image=kf.TF_IMAGE.name, command=MWMS, gpus=1, instance_type="p3.2xlarge")
    assert kf.check_tfjob(tf) == []
    for spec in kf.manifest(tf)["spec"]["tfReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p3.2xlarge"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    mpi = kf.mpijob("h", workers=2, slots_per_worker=2, image=kf.HVD_IMAGE.name, command=line, gpus_per_worker=2, efa=1)
    assert kf.check_mpijob(mpi) == []
    specs = mpi["spec"]["mpiReplicaSpecs"]
    worker = specs["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert worker == {"nvidia.com/gpu": 2, "vpc.amazonaws.com/efa": 1}  # one GPU per slot, EFA where it applies
    assert "resources" not in specs["Launcher"]["template"]["spec"]["containers"][0]  # mpirun needs no GPU
    fewer = kf.mpijob("h", workers=2, slots_per_worker=2, image=kf.HVD_IMAGE.name, command=line, gpus_per_worker=1)
    assert any("slotsPerWorker" in note for note in kf.check_mpijob(fewer))
    assert any(
        "-x PATH" in note
        for note in kf.check_mpijob(
            kf.mpijob(
                "h",
                workers=2,
                slots_per_worker=2,
                image=kf.HVD_IMAGE.name,
                command=[t for t in line if t not in kf.MPI_FORWARD],
                gpus_per_worker=2,
            )
        )
    )


#: The operator's own test cases, copied from kubeflow/trainer at tag v1.9.4 (commit 4445c12a, 2026-08-18), not
#: rebuilt: pkg/controller.v1/tensorflow/pod_test.go, "should generate desired cluster spec" (each TFJob from
#: testutil.NewTFJobWithNamespace(worker, ps, ns) or NewTFJobWithEvaluatorAndNamespace(worker, ps, evaluator, ns),
#: named test-tfjob, the worker 0's TF_CONFIG with CUSTOM_CLUSTER_DOMAIN set as given; "" there is no TF_CONFIG).
GOLDEN_TF_CONFIG = [
    ((1, 0, 0, "ns0"), "", ""),
    ((1, 0, 0, "ns1"), "tf.training.com", ""),
    (
        (1, 1, 0, "ns2"),
        "tf.training.org",
        '{"cluster":{"ps":["test-tfjob-ps-0.ns2.svc.tf.training.org:2222"],"worker":["test-tfjob-worker-0.ns2.svc.'
        'tf.training.org:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}',
    ),
    (
        (1, 1, 1, "ns3"),
        "tf.training.io",
        '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc.tf.training.io:2222"],"ps":["test-tfjob-ps-0.ns3.'
        'svc.tf.training.io:2222"],"worker":["test-tfjob-worker-0.ns3.svc.tf.training.io:2222"]},"task":{"type":'
        '"worker","index":0},"environment":"cloud"}',
    ),
    (
        (1, 1, 1, "ns3"),
        "",
        '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],"ps":["test-tfjob-ps-0.ns3.svc:2222"],'
        '"worker":["test-tfjob-worker-0.ns3.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}',
    ),
]


@pytest.mark.parametrize(("replicas", "domain", "golden"), GOLDEN_TF_CONFIG)
def test_tf_config_is_the_string_the_operators_own_test_expects(replicas, domain, golden):
    """Byte for byte: the same keys in the same order, compact, as Go's json.Marshal writes them."""
    workers, ps, evaluators, namespace = replicas
    m = kf.manifest(kf.tfjob("test-tfjob", workers=workers, image=IMAGE, command=MWMS, namespace=namespace))
    worker = m["spec"]["tfReplicaSpecs"]["Worker"]
    for rtype, count in (("PS", ps), ("Evaluator", evaluators)):
        if count:
            m["spec"]["tfReplicaSpecs"][rtype] = {**copy.deepcopy(worker), "replicas": count}
    assert (kf.tf_config(m, "Worker", 0, cluster_domain=domain) or "") == golden


def _webhook_case(name="test", containers=None, roles=("Worker",)):
    """A TFJob as TestValidateTFJob builds it: each role one pod template with `containers` (a valid one if None)."""
    if containers is None:
        containers = [{"name": "tensorflow", "image": "kubeflow/tf-mnist-with-summaries:latest"}]
    specs = {role: {"template": {"spec": {"containers": copy.deepcopy(containers)}}} for role in roles}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": specs},
    }


#: The admission webhook's own test, TestValidateTFJob in pkg/webhooks/tensorflow/tfjob_webhook_test.go (v1.9.4,
#: as above): each case and the errors it wants, as (field, type); the test compares only those two (it ignores
#: Detail and BadValue). Its managedBy case is left out, as check_tfjob leaves out runPolicy.managedBy.
W = "spec.tfReplicaSpecs[Worker].template.spec.containers"
GOLDEN_WEBHOOK = {
    "valid tfJob": (_webhook_case(), []),
    "TFJob name does not meet DNS1035": (_webhook_case(name="00test"), [("metadata.name", "Invalid value")]),
    "no containers": (_webhook_case(containers=[]), [(W, "Required value"), (W, "Required value")]),
    "empty image": (
        _webhook_case(containers=[{"name": "tensorflow", "image": ""}]),
        [(f"{W}[0].image", "Required value")],
    ),
    "tfJob default container name doesn't present": (
        _webhook_case(containers=[{"name": "", "image": "kubeflow/tf-dist-mnist-test:1.0"}]),
        [(W, "Required value")],
    ),
    "there are more than 2 masterReplica's or ChiefReplica's": (
        _webhook_case(roles=("Chief", "Master")),
        [("spec.tfReplicaSpecs", "Forbidden")],
    ),
}


@pytest.mark.parametrize("case", list(GOLDEN_WEBHOOK))
def test_the_admission_rules_give_the_errors_the_webhooks_own_test_wants(case):
    """The operator's errors only: the course's own rules (TensorFlow's task types, a chief's count) are marked as
    theirs and not the webhook's, so they are left out of the comparison."""
    job, wanted = GOLDEN_WEBHOOK[case]
    try:
        kf.check_tfjob(job)
        problems = []
    except kf.ManifestError as err:
        problems = err.problems
    webhook = [p for p in problems if re.match(r"[\w.\[\]]+: (Required value|Invalid value|Forbidden):", p)]
    found = [tuple(p.split(": ", 2)[:2]) for p in webhook]
    assert found == wanted, problems
