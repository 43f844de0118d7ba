"""Jobs built with the real SageMaker SDK v3 against moto: requests, validation, costs, the guard, the CLI."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading

import pandas as pd
import pytest

from utils import sagemaker_job as sj
from utils.paths import REPO_ROOT


@pytest.fixture(scope="module")
def aws():
    with sj.offline_aws() as emulated:
        emulated.upload_dataset(parts=2)
        yield emulated


@pytest.fixture(scope="module")
def single(aws):
    return sj.request_for(sj.JobConfig(kind="single"), aws)


def channel(request, name):
    return next(c for c in request["InputDataConfig"] if c["ChannelName"] == name)


def test_price_file_has_sources_and_positive_prices():
    table = pd.read_csv(sj.PRICE_FILE)
    assert {"instance_type", "region", "usd_per_hour", "gpus", "source", "read_on"} <= set(table.columns)
    assert table["instance_type"].is_unique
    assert (table["usd_per_hour"] > 0).all()
    assert table["source"].str.contains("http").all(), "every price names the page it was read from"
    assert (table["gpus"] > 0).any() and (table["gpus"] == 0).any(), "the file covers GPU and CPU instances"
    assert (table["local_storage_gb"] >= 0).all() and table["source"].str.contains("local storage").all()


def test_single_job_request_is_valid_and_uses_the_stock_image(single):
    sj.validate(single)
    assert single["ResourceConfig"]["InstanceCount"] == 1
    assert single["AlgorithmSpecification"]["TrainingImage"] == sj.stock_image("ml.g5.2xlarge")
    assert single["AlgorithmSpecification"]["TrainingImage"].endswith("tensorflow-training:2.21-gpu-py312")
    assert single["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600}, "the runtime bound is always set"
    assert channel(single, "train")["InputMode"] == "File"
    assert {c["ChannelName"] for c in single["InputDataConfig"]} == {"train", "code", "sm_drivers"}
    assert "EnableManagedSpotTraining" not in single


def test_mwms_job_changes_only_the_count_and_code(aws, single):
    mwms = sj.request_for(sj.JobConfig(kind="mwms", instances=2), aws)
    sj.validate(mwms)
    changed = sj.changed_fields(single, mwms)
    assert changed["ResourceConfig.InstanceCount"] == (1, 2)
    assert set(changed) == {
        "ResourceConfig.InstanceCount",
        "InputDataConfig[code].DataSource.S3DataSource.S3Uri",
        "InputDataConfig[sm_drivers].DataSource.S3DataSource.S3Uri",
    }, "MWMS needs no launcher and no custom image: one process per instance on the stock image"
    assert json.loads(aws.read_uploaded(mwms, "sm_drivers", "sourcecode.json"))["entry_script"] == "train_mwms.py"


@pytest.mark.parametrize(("hosts", "per_host", "fix", "ranks"), [(2, 4, True, 8), (3, 4, True, 12), (2, 4, False, 4)])
def test_horovod_job_runs_hosts_times_processes_only_when_corrected(aws, hosts, per_host, fix, ranks):
    config = sj.JobConfig(
        kind="horovod", instances=hosts, processes_per_host=per_host, instance_type="ml.g4dn.12xlarge", fix_np=fix
    )
    request = sj.request_for(config, aws)
    sj.validate(request)
    assert request["AlgorithmSpecification"]["TrainingImage"] == sj.horovod_image()
    command = sj.launch_command(request, aws)
    from utils import rehearsal

    assert command[0] == "mpirun"
    assert rehearsal.ranks_in(command) == ranks
    assert f"algo-1:{per_host}" in " ".join(command)


def test_spot_job_sets_limits_and_checkpoints(aws, single):
    spot = sj.request_for(sj.JobConfig(kind="mwms", instances=2, spot=True, max_hours=2, max_wait_hours=6), aws)
    sj.validate(spot)
    assert spot["EnableManagedSpotTraining"] is True
    assert spot["StoppingCondition"] == {"MaxRuntimeInSeconds": 7200, "MaxWaitTimeInSeconds": 21600}
    assert spot["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints"
    assert spot["CheckpointConfig"]["S3Uri"].startswith(f"s3://{sj.BUCKET}/")
    assert spot["HyperParameters"]["checkpoint-dir"] == "/opt/ml/checkpoints", "the script must write there"
    default_wait = sj.request_for(sj.JobConfig(kind="single", spot=True, max_hours=1.5), aws)
    assert default_wait["StoppingCondition"]["MaxWaitTimeInSeconds"] == 2 * 5400


@pytest.mark.parametrize("mode", ["FastFile", "Pipe"])
def test_input_mode_and_sharding_reach_the_channel(aws, mode):
    request = sj.request_for(sj.JobConfig(kind="single", input_mode=mode, sharded=True), aws)
    sj.validate(request)
    train = channel(request, "train")
    assert train["InputMode"] == mode
    assert train["DataSource"]["S3DataSource"]["S3DataDistributionType"] == "ShardedByS3Key"


def test_security_options_reach_the_request(aws):
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    request = sj.request_for(
        sj.JobConfig(
            kind="mwms",
            instances=2,
            instance_type="ml.m5.xlarge",  # no local NVMe storage: SageMaker accepts a volume KMS key for it
            encrypt=True,
            network_isolation=True,
            subnets=("subnet-0abc",),
            security_groups=("sg-0abc",),
            kms_key=key,
        ),
        aws,
    )
    sj.validate(request)
    assert request["EnableInterContainerTrafficEncryption"] is True
    assert request["EnableNetworkIsolation"] is True
    assert request["VpcConfig"] == {"SecurityGroupIds": ["sg-0abc"], "Subnets": ["subnet-0abc"]}
    assert request["ResourceConfig"]["VolumeKmsKeyId"] == key and request["OutputDataConfig"]["KmsKeyId"] == key


def test_validator_rejects_what_the_api_would(single):
    bad = json.loads(json.dumps(single))
    bad["ResourceConfig"]["InstanceCount"] = "two"
    with pytest.raises(ValueError, match="ResourceConfig.InstanceCount"):
        sj.validate(bad)
    del bad["RoleArn"]
    with pytest.raises(ValueError, match="RoleArn"):
        sj.validate(bad)


def test_diff_shows_changed_lines_with_normalized_names(aws, single):
    spot = sj.request_for(sj.JobConfig(kind="single", spot=True), aws)
    diff = sj.request_diff(single, spot)
    assert '+ "EnableManagedSpotTraining": true,' in diff
    assert single["TrainingJobName"] not in diff and spot["TrainingJobName"] not in diff


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kind": "mwms", "instances": 0}, "at least 1 instance"),
        ({"kind": "mwms", "instances": 2, "spot": True, "max_hours": 4, "max_wait_hours": 2}, "at least max_hours"),
        ({"max_wait_hours": 3}, "only applies to managed spot"),
        ({"instance_type": "ml.banana.huge"}, "instance_prices.csv"),
        ({"kind": "horovod", "instances": 2, "processes_per_host": 8, "instance_type": "ml.g5.2xlarge"}, "GPU"),
        ({"kind": "single", "instances": 2}, "kind 'mwms' or 'horovod'"),
        ({"kind": "tpu"}, "unknown job kind"),
        ({"input_mode": "Stream"}, "not one of File, FastFile, Pipe"),
        ({"max_hours": 1000}, "28 days"),
        ({"kind": "mwms", "instances": 2, "subnets": ("subnet-1",)}, "both subnets and security groups"),
        ({"kind": "mwms", "instances": 2, "sharded": True}, "shards the whole dataset itself"),
        ({"kind": "horovod", "instances": 2, "sharded": True}, "Leave sharded off"),
        ({"kind": "mwms", "resume_run": "../other"}, "run id"),
        ({"kind": "mwms", "resume_run": "20261128-101010-abcdef"}, "spot=True or checkpoints=True"),
    ],
)
def test_bad_configurations_say_what_to_do(changes, message):
    with pytest.raises(ValueError, match=message):
        sj.JobConfig(**changes)


def test_cost_guard_refuses_above_the_limit(aws):
    request = sj.request_for(sj.JobConfig(kind="mwms", instances=4, instance_type="ml.g4dn.12xlarge", max_hours=3), aws)
    rate = sj.price("ml.g4dn.12xlarge")
    found = sj.estimate(request)
    assert found.worst_case_usd == pytest.approx(4 * 3 * rate)
    assert sj.check_cost(request, limit_usd=4 * 3 * rate + 0.01).worst_case_usd == found.worst_case_usd
    with pytest.raises(sj.CostLimitError, match="above your limit"):
        sj.check_cost(request, limit_usd=4 * 3 * rate - 0.01)
    with pytest.raises(sj.CostLimitError, match="no MaxRuntimeInSeconds"):
        sj.check_cost({**request, "StoppingCondition": {}}, limit_usd=1e9)
    with pytest.raises(ValueError, match="positive"):
        sj.check_cost(request, limit_usd=0)


def test_spot_savings_is_aws_formula():
    # AWS's own example: billable 100 s of a 500 s training time is an 80 % saving.
    assert sj.spot_savings(100, 500) == pytest.approx(0.8)
    with pytest.raises(ValueError):
        sj.spot_savings(10, 0)


def test_network_guard_blocks_outside_and_allows_loopback():
    guard = sj.NetworkGuard()
    try:
        with socket.socket() as s, pytest.raises(PermissionError, match="192.0.2.1"):
            s.connect(("192.0.2.1", 443))  # TEST-NET-1: refused before any packet is sent
        with pytest.raises(PermissionError, match="name lookup"):
            socket.getaddrinfo("sagemaker.us-east-1.amazonaws.com", 443)
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            with socket.create_connection(server.getsockname(), timeout=5):
                pass
        assert guard.attempts == ["connect 192.0.2.1:443", "name lookup sagemaker.us-east-1.amazonaws.com"]
    finally:
        guard.close()


def test_offline_jobs_attempt_no_outside_connection(aws):
    guard = sj.NetworkGuard()
    try:
        sj.request_for(
            sj.JobConfig(kind="horovod", instances=2, instance_type="ml.g4dn.12xlarge", processes_per_host=2), aws
        )
    finally:
        guard.close()
    assert guard.attempts == []


def test_metric_regexes_read_the_scripts_real_log_lines(tmp_path):
    run = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "train_single.py"), "--epochs", "2", "--data-size", "1500"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[7:])
    found = sj.metrics_from_log(run.stdout)
    assert found["train:loss"] == pytest.approx(result["loss"], abs=5e-5)
    assert found["validation:loss"] == pytest.approx(result["val_loss"], abs=5e-5)
    assert len(found["train:samples_per_s"]) == 2


def test_online_needs_opt_in_and_credentials(no_aws_credentials):
    with pytest.raises(PermissionError, match="COURSE_SAGEMAKER_ONLINE=1"):
        sj.check_online_allowed({})
    with pytest.raises(PermissionError, match="no AWS credentials"):  # the role's form is checked first, offline
        sj.check_online_allowed({sj.ONLINE_FLAG: "1", "SAGEMAKER_ROLE_ARN": ROLE})


def _cli_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sagemaker_job_cli", REPO_ROOT / "scripts" / "sagemaker_job.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    return cli


def test_cli_prints_request_command_and_cost(capsys):
    args = ["horovod", "--instances", "3", "--processes-per-host", "4", "--instance-type", "ml.g4dn.12xlarge"]
    assert _cli_module().main([*args, "--spot", "--max-hours", "2"]) == 0  # in this process: the SDK is imported
    out = json.loads(capsys.readouterr().out)
    assert out["ranks"] == out["ranks_wanted"] == 12
    assert out["launch_command"].startswith("mpirun --host algo-1:4,algo-2:4,algo-3:4")
    assert out["request"]["ResourceConfig"] == {
        "InstanceType": "ml.g4dn.12xlarge",
        "InstanceCount": 3,
        "VolumeSizeInGB": 30,
    }
    assert out["worst_case_usd"] == pytest.approx(round(3 * 2 * sj.price("ml.g4dn.12xlarge"), 2))


def test_cli_bad_input_messages(capsys, monkeypatch):
    cli = _cli_module()
    monkeypatch.delenv(sj.ONLINE_FLAG, raising=False)
    cases = [
        (["mwms", "--instances", "0"], "at least 1 instance"),
        (["single", "--instance-type", "ml.x9.mega"], "instance_prices.csv"),
        (["mwms", "--instances", "2", "--spot", "--max-hours", "5", "--max-wait-hours", "1"], "at least max_hours"),
        (["single", "--online", "--limit-usd", "5"], "COURSE_SAGEMAKER_ONLINE"),
        (["single", "--online"], "--limit-usd"),
    ]
    for args, message in cases:
        assert cli.main(args) == 2, args
        assert message in capsys.readouterr().err, args


def test_horovod_image_is_where_the_build_script_pushes_it():
    run = subprocess.run(
        [
            "bash",
            str(REPO_ROOT / "docker" / "horovod" / "build_and_push.sh"),
            "--dry-run",
            "--account",
            sj.OFFLINE_ACCOUNT,
            "--region",
            "eu-west-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert f"training_image={sj.horovod_image('eu-west-1')}" in run.stdout.splitlines()


def test_horovod_job_check_runs_the_answer(aws, capsys):
    from utils import checks

    right = sj.JobConfig(kind="horovod", instances=3, processes_per_host=4, instance_type="ml.g4dn.12xlarge")
    assert checks.check_horovod_job(sj.request_for(right, aws), aws, instances=3, gpus_per_instance=4)
    bug = sj.replace_config(right, fix_np=False)
    assert not checks.check_horovod_job(sj.request_for(bug, aws), aws, instances=3, gpus_per_instance=4)
    assert "starts 4 rank(s), not 12" in capsys.readouterr().out
    mwms = sj.JobConfig(kind="mwms", instances=3, instance_type="ml.g4dn.12xlarge")
    assert not checks.check_horovod_job(sj.request_for(mwms, aws), aws, instances=3, gpus_per_instance=4)
    assert "no MPI launcher" in capsys.readouterr().out
    two = sj.replace_config(right, instances=2)
    assert not checks.check_horovod_job(sj.request_for(two, aws), aws, instances=3, gpus_per_instance=4)
    assert not checks.check_horovod_job(None, aws, instances=3, gpus_per_instance=4)


def test_input_mode_check():
    from utils import checks

    assert checks.check_input_mode("FastFile", data_gb=2000, volume_gb=500, script_reads_files=True)
    assert not checks.check_input_mode("File", data_gb=2000, volume_gb=500, script_reads_files=True)
    assert not checks.check_input_mode("Pipe", data_gb=2000, volume_gb=500, script_reads_files=True)
    assert checks.check_input_mode("File", data_gb=20, volume_gb=500, script_reads_files=True)
    assert checks.check_input_mode("Pipe", data_gb=2000, volume_gb=500, script_reads_files=False)
    assert not checks.check_input_mode("Stream", data_gb=1, volume_gb=5, script_reads_files=True)


def test_the_sdks_defaults_config_is_validated_once_per_process_and_a_bad_one_is_refused_every_time(aws, monkeypatch):
    """ModelTrainer looks up about ten settings a job, and the SDK validated the whole config against its schema at
    each: sj.validate_sdk_config_once keeps one validation per distinct config."""
    import jsonschema
    from sagemaker.core.config.config_manager import SageMakerConfig

    sj.validate_sdk_config_once()
    SageMakerConfig.validate_sagemaker_config.validated.clear()  # as in a fresh process: nothing validated yet
    schema_checks = []
    validate = jsonschema.validate
    monkeypatch.setattr(jsonschema, "validate", lambda *a, **k: (schema_checks.append(a[0]), validate(*a, **k))[1])
    for _ in range(2):
        sj.request_for(sj.JobConfig(kind="mwms", instances=2), aws)
    assert len(schema_checks) == 1, f"{len(schema_checks)} validations of the config for two jobs"
    assert schema_checks[0]["SageMaker"]["PythonSDK"]["Modules"]["TelemetryOptOut"] is True  # the course's config
    for _ in range(2):  # not remembered: refused at each call
        with pytest.raises(jsonschema.ValidationError, match="NotAKey"):
            SageMakerConfig.validate_sagemaker_config({"SchemaVersion": "1.0", "NotAKey": 1})
    tags = [{"Key": "course", "Value": "yes"}]
    SageMakerConfig.validate_sagemaker_config({"SchemaVersion": "1.0", "SageMaker": {"TrainingJob": {"Tags": tags}}})
    for _ in range(2):  # the same JSON text with a tuple, which the schema refuses: not taken for the list that passed
        with pytest.raises(jsonschema.ValidationError, match="is not of type 'array'"):
            as_tuple = {"SchemaVersion": "1.0", "SageMaker": {"TrainingJob": {"Tags": tuple(tags)}}}
            SageMakerConfig.validate_sagemaker_config(as_tuple)


def test_spot_limits_check(aws):
    from utils import checks

    good = sj.JobConfig(kind="mwms", instances=2, spot=True, max_hours=7.5, max_wait_hours=15)
    assert checks.check_spot_limits(sj.request_for(good, aws), usual_hours=5, margin=0.5)
    short = sj.replace_config(good, max_hours=5, max_wait_hours=10)
    assert not checks.check_spot_limits(sj.request_for(short, aws), usual_hours=5, margin=0.5)
    equal_wait = sj.replace_config(good, max_wait_hours=7.5)
    assert not checks.check_spot_limits(sj.request_for(equal_wait, aws), usual_hours=5, margin=0.5)
    on_demand = sj.JobConfig(kind="mwms", instances=2, max_hours=7.5)
    assert not checks.check_spot_limits(sj.request_for(on_demand, aws), usual_hours=5, margin=0.5)


# ----------------------------------------------------------------------------------------------------
# Bad input to the command line and to the online path: refused before anything is sent, in one line

KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


class _RefusingAWS(http.server.BaseHTTPRequestHandler):
    """An AWS endpoint on loopback that refuses every call as STS refuses unusable credentials."""

    calls: list[str] = []

    def do_POST(self):  # the name http.server calls
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _RefusingAWS.calls.append(self.path)
        body = (
            b'<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type>'
            b"<Code>InvalidClientTokenId</Code><Message>The security token included in the request is invalid."
            b"</Message></Error><RequestId>course-test</RequestId></ErrorResponse>"
        )
        self.send_response(403)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def refusing_aws():
    """The address of an AWS endpoint on this machine that answers every call with 403 InvalidClientTokenId."""
    _RefusingAWS.calls = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RefusingAWS)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def online_env(endpoint: str) -> dict[str, str]:
    """Opted in, with credentials that AWS (the endpoint given) will not accept, and a role."""
    return {
        sj.ONLINE_FLAG: "1",
        "AWS_ACCESS_KEY_ID": "AKIAUNUSABLE00000000",
        "AWS_SECRET_ACCESS_KEY": "unusable",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,  # every AWS call goes there, nowhere else
        "AWS_EC2_METADATA_DISABLED": "true",
        "SAGEMAKER_ROLE_ARN": ROLE,
    }


def without_aws(settings: dict[str, str]) -> dict[str, str]:
    """This process's environment without its AWS settings, and with `settings`: a new process's environment."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | settings


def run_cli(*args, env):
    """scripts/sagemaker_job.py in a new process, as a learner runs it: what it writes to stderr is all there is."""
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "sagemaker_job.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env=without_aws(env),
    )


def test_online_refuses_a_job_over_the_limit_before_calling_aws(refusing_aws, monkeypatch, capsys):
    """In this process (a new one would import the SDK again): the guard stops the CLI before any call."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in online_env(refusing_aws).items():
        monkeypatch.setenv(key, value)
    assert _cli_module().main(["single", "--online", "--limit-usd", "0.01"]) == 2
    assert "above your limit of $0.01" in capsys.readouterr().err
    assert _RefusingAWS.calls == [], "the cost guard must come before any call to AWS"


def test_online_turns_an_aws_refusal_into_one_line_that_says_what_to_do(refusing_aws):
    run = run_cli("single", "--online", "--limit-usd", "100", env=online_env(refusing_aws))
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "InvalidClientTokenId" in run.stderr and "aws sts get-caller-identity" in run.stderr
    assert _RefusingAWS.calls, "the refusal came from the endpoint"


def test_an_upload_refused_by_s3_is_named_as_s3_named_it():
    """boto3's upload_file raises S3UploadFailedError in place of S3's ClientError (boto3/s3/transfer.py): the line
    still names the operation, S3's code and what to do."""
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import ClientError

    refusal = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "PutObject")
    try:
        try:
            raise refusal
        except ClientError as e:
            raise S3UploadFailedError(f"Failed to upload train.py to bucket/key: {e}")  # noqa: B904 (as boto3 does)
    except S3UploadFailedError as upload_error:
        line = sj.aws_error_line(upload_error)
    assert line.startswith("AWS refused PutObject (AccessDenied: Access Denied)"), line
    assert sj._AWS_ADVICE["access"] in line


def test_online_says_so_when_aws_cannot_be_reached():
    with socket.socket() as closed:  # a port nothing listens on once this block ends
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    run = run_cli(
        "single",
        "--online",
        "--limit-usd",
        "100",
        env=online_env(f"http://127.0.0.1:{port}") | {"AWS_MAX_ATTEMPTS": "1"},
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "could not reach AWS" in run.stderr


def test_an_invalid_limit_is_named_before_missing_credentials(no_aws_credentials, capsys):
    no_aws_credentials.setenv(sj.ONLINE_FLAG, "1")
    cli = load_cli()
    for limit in ("0", "-5"):
        assert cli.main(["single", "--online", "--limit-usd", limit]) == 2
        err = capsys.readouterr().err
        assert "cost limit must be a positive number" in err and "credentials" not in err, err


def load_cli():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sagemaker_job_cli", REPO_ROOT / "scripts" / "sagemaker_job.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    return cli


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["single", "--epochs", "-3"], "epochs must be a whole number of at least 1, got -3"),
        (["single", "--batch-size", "0"], "batch-size must be a whole number of at least 1, got 0"),
        (["mwms", "--instances", "2", "--kms-key", KMS_KEY, "--instance-type", "ml.g5.2xlarge"], "local NVMe"),
    ],
)
def test_cli_refuses_bad_hyperparameters_and_a_volume_key_on_local_storage(capsys, args, message):
    assert load_cli().main(args) == 2, args
    assert message in capsys.readouterr().err


def test_a_volume_key_is_refused_on_every_type_with_local_storage_and_kept_on_the_others():
    table = sj.prices()
    with_disk = [t for t in table.index if table.loc[t, "local_storage_gb"] > 0]
    without = [t for t in table.index if table.loc[t, "local_storage_gb"] == 0]
    assert "ml.g5.2xlarge" in with_disk and "ml.m5.xlarge" in without and "ml.p3.2xlarge" in without
    for kind in with_disk:
        with pytest.raises(ValueError, match=f"{kind} has local NVMe storage"):
            sj.JobConfig(kind="mwms", instances=2, instance_type=kind, kms_key=KMS_KEY)
    for kind in without:
        assert sj.JobConfig(kind="mwms", instances=2, instance_type=kind, kms_key=KMS_KEY).kms_key == KMS_KEY


def test_the_launch_command_shows_the_containers_python_not_this_machines(capsys):
    from utils import rehearsal

    args = ["horovod", "--instances", "2", "--processes-per-host", "4", "--instance-type", "ml.g4dn.12xlarge"]
    assert _cli_module().main(args) == 0
    command = json.loads(capsys.readouterr().out)["launch_command"]
    assert sys.executable not in command and str(REPO_ROOT) not in command
    assert f" {rehearsal.CONTAINER_PYTHON} -m mpi4py train_horovod.py" in command
    assert "AWS_ACCESS_KEY_ID" not in command, "a job's instances get their credentials from its role, not -x"


# --- a managed MLflow tracking server: checked offline, priced, created only with the opt-in


def test_a_tracking_server_request_is_checked_as_the_api_checks_it():
    from utils import tracking

    good = sj.mlflow_server_request("course-mlflow", ROLE, "s3://bucket/mlflow")
    assert good["TrackingServerSize"] == "Small"
    # the server's MLflow is set, never AWS's default, to a version AWS pairs a client with: the jobs' client
    assert good["MlflowVersion"] == tracking.MANAGED_MLFLOW_VERSION and sj.aws_pairs_mlflow(good["MlflowVersion"])
    assert f"mlflow=={tracking.paired_client(good['MlflowVersion'])}" in tracking.JOB_REQUIREMENTS
    assert sj.mlflow_server_request("ok", ROLE, "s3://b", mlflow_version="3.0.0")["MlflowVersion"] == "3.0.0"
    for args, named in [
        (("bad name!", ROLE, "s3://bucket"), "TrackingServerName"),
        (("ok", ROLE, "ftp://bucket"), "ArtifactStoreUri"),
        (("ok", ROLE, "s3://bucket", "Huge"), "TrackingServerSize must be one of Small, Medium, Large"),
        (("ok", ROLE, "s3://bucket", "Small", sj.REGION, "latest"), "MlflowVersion 'latest' does not match"),
    ]:
        with pytest.raises(ValueError, match=named):
            sj.mlflow_server_request(*args)


def test_a_tracking_server_is_priced_from_the_recorded_price_or_the_one_given_never_a_guess():
    table = pd.read_csv(sj.MLFLOW_PRICE_FILE)
    small = table[table["size"] == "Small"].iloc[0]
    assert sj.mlflow_server_cost("Small", 10, small.region) == pytest.approx(10 * small.usd_per_hour)
    with pytest.raises(ValueError, match="no recorded price for a Large tracking server.*pass usd_per_hour="):
        sj.mlflow_server_cost("Large", 10, small.region)
    assert sj.mlflow_server_cost("Large", 2, "us-east-1", usd_per_hour=1.5) == 3.0
    with pytest.raises(ValueError, match="hours must be a positive number"):
        sj.mlflow_server_cost("Small", 0, small.region)
    assert all(table.source.str.len() > 40) and table.read_on.notna().all(), "every price names its source"


def test_a_tracking_server_over_the_limit_or_without_the_opt_in_is_refused_before_calling_aws(
    refusing_aws, monkeypatch
):
    for k, v in online_env(refusing_aws).items():
        monkeypatch.setenv(k, v)
    with pytest.raises(sj.CostLimitError, match=r"you plan costs \$7.70, above your limit of \$5.00"):
        sj.create_mlflow_server_online("course", "s3://bucket/mlflow", 5, 12, region="eu-west-2")
    monkeypatch.delenv(sj.ONLINE_FLAG)
    with pytest.raises(Exception, match=sj.ONLINE_FLAG):
        sj.create_mlflow_server_online("course", "s3://bucket/mlflow", 50, 12, region="eu-west-2")
    assert _RefusingAWS.calls == [], "the guard and the opt-in come before any call to AWS"
    code = (  # in a fresh process: a test that ran before in this one may have left moto's mock in place
        "from utils import sagemaker_job as sj\n"
        "sj.create_mlflow_server_online('course', 's3://bucket/mlflow', 50, 12, region='eu-west-2')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=without_aws(online_env(refusing_aws)),
        cwd=REPO_ROOT,
    )
    assert "OnlineError" in out.stderr and "InvalidClientTokenId" in out.stderr, out.stderr[-1500:]
    assert _RefusingAWS.calls, "with the opt-in, within the limit, the request was sent"


# --- the role ARN, credentials and the instance count: checked here, before any call to AWS

GOOD_ROLE_ARNS = [
    ROLE,
    "arn:aws:iam::123456789012:role/service-role/AmazonSageMaker-ExecutionRole-20261125T101010",
    "arn:aws-cn:iam::123456789012:role/division_abc/subdivision_xyz/Course+Role=1,2.x@y_z-w",
    "arn:aws-us-gov:iam::123456789012:role/" + "R" * 64,
]
BAD_ROLE_ARNS = [
    ("arn:aws:iam::12:user/bob", "12-digit account"),
    ("arn:aws:iam::123456789012:user/bob", "not a role"),
    ("arn:aws:iam::123456789012:role/", "role name"),
    ("arn:aws:iam::123456789012:role/path/", "role name"),
    ("arn:aws:iam::123456789012:role/" + "R" * 65, "64"),
    ("arn:aws:iam::123456789012:role/bad name", "role name"),
    ("arn:aws:iam::123456789012:role/rôle", "role name"),
    ("arn:aws-mars:iam::123456789012:role/Course", "partition"),
    ("arn:aws:s3:::123456789012:role/Course", "not an IAM ARN"),
    ("arn:aws:iam::123456789012:role/Course\n", "role name"),
    ("arn:aws:iam:us-east-1:123456789012:role/Course", "not an IAM ARN"),
    ("SageMakerRole", "not an IAM ARN"),
]


@pytest.mark.parametrize("arn", GOOD_ROLE_ARNS)
def test_a_role_arn_of_the_right_form_is_accepted(no_aws_credentials, arn):
    no_aws_credentials.setenv("AWS_ACCESS_KEY_ID", "AKIAUNUSABLE00000000")
    no_aws_credentials.setenv("AWS_SECRET_ACCESS_KEY", "unusable")
    sj.check_online_allowed({sj.ONLINE_FLAG: "1", "SAGEMAKER_ROLE_ARN": arn})


@pytest.mark.parametrize(("arn", "why"), BAD_ROLE_ARNS)
def test_a_role_arn_of_the_wrong_form_is_refused_with_what_is_wrong(no_aws_credentials, arn, why):
    no_aws_credentials.setenv("AWS_ACCESS_KEY_ID", "AKIAUNUSABLE00000000")
    no_aws_credentials.setenv("AWS_SECRET_ACCESS_KEY", "unusable")
    with pytest.raises(PermissionError, match="SAGEMAKER_ROLE_ARN") as refused:
        sj.check_online_allowed({sj.ONLINE_FLAG: "1", "SAGEMAKER_ROLE_ARN": arn})
    line = str(refused.value)
    assert why in line and "\n" not in line, line
    assert "arn:aws:iam::<12-digit account>:role/" in line, "the line says what a role ARN looks like"


def test_the_cli_refuses_a_user_arn_before_any_call_to_aws(refusing_aws, monkeypatch, capsys):
    """In this process: the offline build runs, then the role is refused; the endpoint never hears of it."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in (online_env(refusing_aws) | {"SAGEMAKER_ROLE_ARN": "arn:aws:iam::12:user/bob"}).items():
        monkeypatch.setenv(key, value)
    assert _cli_module().main(["single", "--online", "--limit-usd", "100"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "SAGEMAKER_ROLE_ARN" in err and "12-digit account" in err, err
    assert _RefusingAWS.calls == [], "the role is checked before any call to AWS (STS, S3, SageMaker)"


@pytest.fixture
def no_credentials_anywhere(no_aws_credentials):
    """No credentials, and the metadata service NOT turned off: botocore's chain would end by asking it."""
    monkeypatch = no_aws_credentials
    for var in ("AWS_EC2_METADATA_DISABLED", "AWS_METADATA_SERVICE_TIMEOUT", "AWS_METADATA_SERVICE_NUM_ATTEMPTS"):
        monkeypatch.delenv(var, raising=False)  # restored after the test, also if something sets them meanwhile
    for var in [k for k in os.environ if k.startswith(("AWS_CONTAINER_", "AWS_WEB_IDENTITY", "AWS_ROLE_"))]:
        monkeypatch.delenv(var)
    monkeypatch.delenv("COURSE_AWS_IMDS", raising=False)  # the course's opt-in for asking the metadata service
    return monkeypatch


def test_missing_credentials_are_found_missing_without_asking_the_network(no_credentials_anywhere, capsys):
    no_credentials_anywhere.setattr(sj, "aws_instance", lambda: None)  # not an EC2 or SageMaker machine
    guard = sj.NetworkGuard()
    try:
        with pytest.raises(PermissionError, match="no AWS credentials") as refused:
            sj.check_online_allowed({sj.ONLINE_FLAG: "1", "SAGEMAKER_ROLE_ARN": ROLE})
    finally:
        guard.close()
    assert guard.attempts == [], "the instance metadata service (169.254.169.254) must not be asked"
    assert "metadata service" in str(refused.value) and "\n" not in str(refused.value), refused.value
    assert capsys.readouterr().err == ""


def test_the_cli_without_credentials_says_so_in_one_line_and_asks_no_metadata_service(no_credentials_anywhere, capsys):
    """The tester's case, in this process (the guard sees its sockets): `--online` with no credentials anywhere."""
    no_credentials_anywhere.setenv(sj.ONLINE_FLAG, "1")
    no_credentials_anywhere.setenv("SAGEMAKER_ROLE_ARN", ROLE)
    no_credentials_anywhere.setattr(sj, "aws_instance", lambda: None, raising=False)  # not an EC2/SageMaker machine
    guard = sj.NetworkGuard()
    try:
        assert _cli_module().main(["single", "--online", "--limit-usd", "100"]) == 2
    finally:
        guard.close()
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no AWS credentials" in err, err
    assert guard.attempts == [], f"no connection to {guard.attempts} (169.254.169.254 is the metadata service)"


@pytest.mark.parametrize(
    ("instance", "opt_in"), [("a SageMaker notebook instance", None), ("an EC2 instance", None), (None, "1")]
)
def test_on_an_aws_instance_or_when_asked_the_metadata_service_is_asked_and_that_is_said(
    no_credentials_anywhere, capsys, instance, opt_in
):
    no_credentials_anywhere.setattr(sj, "aws_instance", lambda: instance)
    env = {sj.ONLINE_FLAG: "1", "SAGEMAKER_ROLE_ARN": ROLE}
    if opt_in:
        env[sj.IMDS_FLAG] = opt_in
    guard = sj.NetworkGuard()
    try:
        with pytest.raises(PermissionError, match="no AWS credentials"):
            sj.check_online_allowed(env)
    finally:
        guard.close()
    assert any("169.254.169.254" in a for a in guard.attempts), guard.attempts
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "169.254.169.254" in said[0] and (instance or sj.IMDS_FLAG) in said[0], said


def test_an_instance_is_recognised_from_its_own_files(tmp_path):
    assert sj.aws_instance(tmp_path) is None
    (tmp_path / "sys/class/dmi/id").mkdir(parents=True)
    (tmp_path / "sys/class/dmi/id/sys_vendor").write_text("QEMU\n")
    assert sj.aws_instance(tmp_path) is None
    (tmp_path / "sys/class/dmi/id/sys_vendor").write_text("Amazon EC2\n")
    assert sj.aws_instance(tmp_path) == "an EC2 instance"
    (tmp_path / "opt/ml/metadata").mkdir(parents=True)
    (tmp_path / "opt/ml/metadata/resource-metadata.json").write_text('{"ResourceName": "course"}')
    assert sj.aws_instance(tmp_path) == "a SageMaker notebook instance"
    xen = tmp_path / "xen"
    (xen / "sys/hypervisor").mkdir(parents=True)
    (xen / "sys/hypervisor/uuid").write_text("ec2e1916-9099-7caf-fd21-012345abcdef\n")
    assert sj.aws_instance(xen) == "an EC2 instance"


def test_more_instances_than_one_training_job_allows_are_refused_before_anything_starts(monkeypatch, capsys):
    def heavy(*args, **kwargs):
        raise AssertionError("the job was being built: the count must be refused before")

    monkeypatch.setattr(sj, "offline_aws", heavy)
    assert _cli_module().main(["mwms", "--instances", "100000"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "Maximum number of instances per training job" in err and "20" in err, err
    assert "quota" in err and "no maximum" in err, "the line says it is an account quota, not an API maximum"


def test_the_instance_limit_is_a_quota_that_a_raised_quota_lifts():
    assert sj.JobConfig(kind="mwms", instances=sj.INSTANCES_PER_JOB_QUOTA).instances == 20
    with pytest.raises(ValueError, match="instance_quota"):
        sj.JobConfig(kind="mwms", instances=21)
    assert sj.JobConfig(kind="mwms", instances=64, instance_quota=64).instances == 64
    with pytest.raises(ValueError, match="your quota of 64"):
        sj.JobConfig(kind="mwms", instances=65, instance_quota=64)
    with pytest.raises(ValueError, match="instance_quota must be a whole number"):
        sj.JobConfig(kind="mwms", instances=2, instance_quota=0)


def test_the_api_itself_sets_no_maximum_on_a_jobs_instance_count():
    """The premise of the message: CreateTrainingJob's ResourceConfig.InstanceCount has a minimum and no maximum in
    botocore's SageMaker service model, so the limit of 20 is the account quota, not the API."""
    import botocore.session

    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingInstanceCount")
    assert shape.metadata.get("max") is None, shape.metadata


def test_a_profile_that_is_not_there_is_named_without_asking_the_network(no_credentials_anywhere):
    no_credentials_anywhere.setenv("AWS_PROFILE", "no-such-profile")
    guard = sj.NetworkGuard()
    try:
        with pytest.raises(PermissionError, match=r"could not be loaded \(The config profile \(no-such-profile\)"):
            sj.check_online_allowed({sj.ONLINE_FLAG: "1", "SAGEMAKER_ROLE_ARN": ROLE})
    finally:
        guard.close()
    assert guard.attempts == []


def test_a_request_after_the_emulated_aws_stopped_says_which_cell_starts_it_again():
    with sj.offline_aws() as emulated:
        pass
    with pytest.raises(sj.AWSStopped, match="Run the cell that starts it again") as stopped:
        sj.request_for(sj.JobConfig(kind="single"), emulated)
    assert stopped.value._render_traceback_() == [f"AWSStopped: {sj.STOPPED_HELP}"]  # in a notebook: no traceback


@pytest.mark.slow
def test_two_consecutive_spot_jobs_both_train(aws, tmp_path):
    """SageMaker restores whatever is under a job's CheckpointConfig.S3Uri into every job that names it, not only
    into a restart (AWS, "Resume training from a checkpoint"); the rehearsal does the same at every start. A restart
    of one job resumes it; the next job of the same config starts on a prefix of its own and trains every epoch."""
    from utils import rehearsal

    config = sj.JobConfig(kind="mwms", spot=True, hyperparameters={"epochs": 1, "batch-size": 64, "data-size": 1500})
    first = sj.request_for(config, aws)
    done = rehearsal.rehearse(first, aws.s3, root=tmp_path / "a", timeout=240, stream=False, where="loopback")
    assert [len(r["loss"]) for r in done.records()] == [1]
    # the same job started again (a spot restart): the checkpoints under its URI come back, nothing is left to train
    again = rehearsal.rehearse(first, aws.s3, root=tmp_path / "b", timeout=240, stream=False, where="loopback")
    assert "every epoch is done" in again.output(0), "the rehearsal must restore the URI at every start"
    # the next job of the same config: a prefix of its own, so it trains
    second = sj.request_for(config, aws)
    trained = rehearsal.rehearse(second, aws.s3, root=tmp_path / "c", timeout=240, stream=False, where="loopback")
    assert "every epoch is done" not in trained.output(0), "the second spot job resumed the first's last epoch"
    assert [len(r["loss"]) for r in trained.records()] == [1], "the second spot job trained nothing"
    assert second["CheckpointConfig"]["S3Uri"] != first["CheckpointConfig"]["S3Uri"]


def test_warm_pool_retries_and_infra_check_reach_the_request_and_the_guard_counts_the_pool(aws):
    request = sj.request_for(
        sj.JobConfig(kind="mwms", instances=2, keep_alive_minutes=30, retries=2, infra_check=True), aws
    )
    sj.validate(request)
    assert request["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 1800
    assert request["RetryStrategy"] == {"MaximumRetryAttempts": 2}
    assert request["InfraCheckConfig"] == {"EnableInfraCheck": True}
    rate = sj.price("ml.g5.2xlarge")
    assert sj.estimate(request).worst_case_usd == pytest.approx(2 * (1 + 0.5) * rate)  # the pool is billed
    # the API's own limit (botocore's model: 21600 s since December 2025), not the developer guide's 3600 s
    assert sj.JobConfig(keep_alive_minutes=360).keep_alive_minutes == 360
    for bad in ({"keep_alive_minutes": 361}, {"retries": 31}, {"retries": -1}):
        with pytest.raises(ValueError, match="whole number from 0 to"):
            sj.JobConfig(**bad)


def test_a_region_without_a_recorded_price_is_refused_not_priced_at_another_regions_rate(aws):
    with pytest.raises(ValueError, match="us-east-1's, not eu-west-1's"):
        sj.JobConfig(region="eu-west-1")
    request = sj.request_for(sj.JobConfig(kind="single"), aws)
    with pytest.raises(ValueError, match="not eu-west-1's"):
        sj.check_cost(request, 100.0, region="eu-west-1")


def test_an_mlflow_app_request_is_checked_as_the_api_checks_it_and_server_versions_against_aws_pairs():
    role, uri = f"arn:aws:iam::{sj.OFFLINE_ACCOUNT}:role/CourseMlflow", "s3://course-bucket/mlflow"
    app = sj.mlflow_app_request("course-mlflow", role, uri)
    assert app == {
        "Name": "course-mlflow",
        "ArtifactStoreUri": uri,
        "RoleArn": role,
        "AccountDefaultStatus": "DISABLED",
    }
    with pytest.raises(ValueError, match="pattern"):
        sj.mlflow_app_request("course_mlflow", role, uri)  # an underscore: the API's name pattern refuses it
    assert sj.aws_pairs_mlflow("3.0.1") and sj.aws_pairs_mlflow("2.16") and not sj.aws_pairs_mlflow("3.17.2")
