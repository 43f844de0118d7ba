"""The course's training scripts as Amazon SageMaker training jobs, built with SDK v3 and checked offline.

Offline (the default) the real SDK runs against moto's emulated AWS in this process: `ModelTrainer`
uploads the code to an emulated S3 bucket and sends a real CreateTrainingJob request, which is captured
with a botocore event hook, validated against botocore's published SageMaker service model, and
priced from `data/instance_prices.csv`. Nothing leaves the machine (`NetworkGuard` makes sure of it).
Online, only with AWS credentials *and* `COURSE_SAGEMAKER_ONLINE=1`, the same request is sent to AWS
after the cost guard has accepted it.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from utils.paths import REPO_ROOT

PRICE_FILE = REPO_ROOT / "data" / "instance_prices.csv"
REGION = "us-east-1"
#: An account and role of the emulated AWS: nothing offline needs a real one.
OFFLINE_ACCOUNT = "123456789012"
OFFLINE_ROLE = f"arn:aws:iam::{OFFLINE_ACCOUNT}:role/SageMakerCourseRole"
BUCKET = "course-sagemaker-bucket"
TF_VERSION, PY_VERSION = "2.21", "py312"
#: The opt-in for the online path (with AWS credentials): a job is never started without it.
ONLINE_FLAG = "COURSE_SAGEMAKER_ONLINE"
#: The course's Horovod image (docker/horovod), as it is named once pushed to the learner's ECR.
HOROVOD_REPOSITORY, HOROVOD_TAG = "tensorflow-horovod", "2.21-gpu-py312-horovod0.28.1"
KINDS = {"single": "train_single.py", "mwms": "train_mwms.py", "horovod": "train_horovod.py"}
#: SageMaker's default for the quota "Maximum number of instances per training job": an account quota per Region,
#: adjustable in the Service Quotas console ("Amazon SageMaker AI endpoints and quotas", AWS General Reference,
#: https://docs.aws.amazon.com/general/latest/gr/sagemaker.html#limits_sagemaker; the SageMaker Developer Guide
#: lists the same default, "Maximum number of instances per training job – 20", in
#: https://docs.aws.amazon.com/sagemaker/latest/dg/feature-store-feature-processor-quotas.html). The API sets no
#: maximum: CreateTrainingJob's ResourceConfig.InstanceCount (TrainingInstanceCount in botocore's SageMaker service
#: model) has a minimum of 0 and no maximum. The quota counts one job; "Number of instances across all training
#: jobs" (default 4 in a new account) bounds all running jobs together, and each instance type has its own quota.
INSTANCES_PER_JOB_QUOTA = 20
INPUT_MODES = ("File", "FastFile", "Pipe")
#: The log line every course script prints per epoch, e.g. "epoch 2/5: loss 0.0123 val_loss 0.0145 (812 samples/s)".
METRIC_DEFINITIONS = [
    {"Name": "train:loss", "Regex": r"epoch \d+/\d+: loss ([0-9.eE+-]+)"},
    {"Name": "validation:loss", "Regex": r"val_loss ([0-9.eE+-]+)"},
    {"Name": "train:samples_per_s", "Regex": r"\(([0-9.]+) samples/s\)"},
]


# ----------------------------------------------------------------------------------------------------
# What a job is made of


def instance_limit_message(instances: int, quota: int = INSTANCES_PER_JOB_QUOTA) -> str:
    """Why a job of `instances` instances is refused, and what to do: one line."""
    if quota == INSTANCES_PER_JOB_QUOTA:
        limit = (
            f"SageMaker's quota 'Maximum number of instances per training job' is {quota} by default "
            "(AWS General Reference, Amazon SageMaker AI endpoints and quotas)"
        )
        todo = (
            f"use at most {quota} instances, or ask for a higher quota in the Service Quotas console (Amazon "
            "SageMaker) and pass the quota you were granted as instance_quota (--instance-quota)"
        )
    else:
        limit = f"your quota of {quota} for 'Maximum number of instances per training job' (instance_quota)"
        todo = f"use at most {quota} instances, or ask for a higher quota in the Service Quotas console first"
    return (
        f"{instances} instances is more than one training job may have: {limit}. That is an account quota, which "
        "a quota increase raises, not an API maximum (CreateTrainingJob's ResourceConfig.InstanceCount has no "
        f"maximum): {todo}"
    )


@dataclass(frozen=True)
class JobConfig:
    """Everything that decides one job's request. Validated on creation, with errors that say what to do."""

    kind: str = "single"
    instances: int = 1
    processes_per_host: int = 1
    instance_type: str = "ml.g5.2xlarge"
    spot: bool = False
    max_hours: float = 1.0
    max_wait_hours: float | None = None
    input_mode: str = "File"
    sharded: bool = False
    encrypt: bool = False
    network_isolation: bool = False
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    kms_key: str | None = None
    checkpoints: bool = False
    fix_np: bool = True
    hyperparameters: Mapping[str, Any] = field(default_factory=lambda: {"epochs": 5, "batch-size": 64})
    region: str = REGION
    mlflow_arn: str = ""  # a managed MLflow server (tracking server or app) the job's script logs to
    mlflow_experiment: str = "course"
    #: that server's MLflow version (an App's: what DescribeMlflowApp reports); the job installs the client AWS
    #: pairs with it (tracking.job_requirements)
    mlflow_version: str = ""
    #: your account's "Maximum number of instances per training job" quota, if it was raised above the default
    instance_quota: int = INSTANCES_PER_JOB_QUOTA
    #: resume an earlier job on purpose: the run id at the end of its checkpoint prefix (checkpoint_uri); empty, every
    #: job gets a prefix of its own, since SageMaker restores a prefix into every job that names it
    resume_run: str = ""
    #: managed warm pool: keep the instances this many minutes after the job for the next one (0-60; billed while kept)
    keep_alive_minutes: int = 0
    #: RetryStrategy.MaximumRetryAttempts: SageMaker restarts a job that failed on an internal error (0 = none, 1-30)
    retries: int = 0
    #: InfraCheckConfig.EnableInfraCheck: SageMaker checks the instances' hardware and network before training
    infra_check: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown job kind {self.kind!r}: choose one of {', '.join(KINDS)}")
        if not isinstance(self.instances, int) or self.instances < 1:
            raise ValueError(f"a job needs at least 1 instance, got {self.instances!r}")
        if isinstance(self.instance_quota, bool) or not isinstance(self.instance_quota, int) or self.instance_quota < 1:
            raise ValueError(
                "instance_quota must be a whole number of at least 1 (your account's quota 'Maximum number of "
                f"instances per training job'), got {self.instance_quota!r}"
            )
        if self.instances > self.instance_quota:
            raise ValueError(instance_limit_message(self.instances, self.instance_quota))
        if not isinstance(self.processes_per_host, int) or self.processes_per_host < 1:
            raise ValueError(f"processes per host must be at least 1, got {self.processes_per_host!r}")
        if self.kind == "single" and (self.instances, self.processes_per_host) != (1, 1):
            raise ValueError("the single-worker script runs on 1 instance with 1 process: use kind 'mwms' or 'horovod'")
        if self.kind == "mwms" and self.processes_per_host != 1:
            raise ValueError(
                "the MWMS script runs one worker per instance (it uses every device of its instance): "
                "leave processes per host at 1"
            )
        if self.sharded and self.kind in ("mwms", "horovod"):
            raise ValueError(
                f"the {self.kind} script shards the whole dataset itself (by worker or rank) and needs every instance "
                "to receive all of it: ShardedByS3Key would give each instance only some of the channel's files, "
                "and the workers would train on different data. Leave sharded off (FullyReplicated)"
            )
        if self.input_mode not in INPUT_MODES:
            raise ValueError(f"input mode {self.input_mode!r} is not one of {', '.join(INPUT_MODES)}")
        if not self.max_hours > 0:
            raise ValueError(f"max_hours must be positive, got {self.max_hours!r}")
        if self.mlflow_arn:
            from utils import tracking

            tracking.job_environment(self.mlflow_arn, self.mlflow_experiment)  # an ARN and a name, or why not
            tracking.job_requirements(self.mlflow_version or tracking.MANAGED_MLFLOW_VERSION)  # a paired client
            if self.network_isolation:
                raise ValueError(
                    "a job with network isolation cannot reach an MLflow server: leave mlflow_arn empty, or "
                    "network_isolation off"
                )
        if self.max_hours * 3600 > 28 * 24 * 3600:
            raise ValueError(f"max_hours={self.max_hours} is more than SageMaker's limit of 28 days (672 h)")
        if self.max_wait_hours is not None and not self.spot:
            raise ValueError("max_wait_hours only applies to managed spot: set spot=True or leave max_wait_hours out")
        if self.spot and self.max_wait_hours is not None and self.max_wait_hours < self.max_hours:
            raise ValueError(
                f"max_wait_hours ({self.max_wait_hours}) must be at least max_hours ({self.max_hours}): "
                "the wait for spot capacity includes the training time"
            )
        if self.resume_run and not (self.with_checkpoints and RUN_ID.fullmatch(self.resume_run)):
            raise ValueError(
                f"resume_run={self.resume_run!r}: give the run id at the end of an earlier job's checkpoint prefix "
                "(letters, digits, '.', '_' or '-'), for a job with checkpoints (spot=True or checkpoints=True)"
            )
        if bool(self.subnets) != bool(self.security_groups):
            raise ValueError("a VPC needs both subnets and security groups: give both or neither")
        for name in ("epochs", "batch-size", "batch_size"):
            value = self.hyperparameters.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        for name, value, top in (
            ("keep_alive_minutes", self.keep_alive_minutes, keep_alive_max_minutes()),
            ("retries", self.retries, 30),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise ValueError(f"{name} must be a whole number from 0 to {top}, got {value!r}")
        price(self.instance_type, region=self.region)  # an unknown type or region fails here, naming the price file
        table = prices()
        storage = int(table.loc[self.instance_type, "local_storage_gb"])
        if self.kms_key and storage > 0:
            plain = [t for t in table.index if int(table.loc[t, "local_storage_gb"]) == 0]
            raise ValueError(
                f"{self.instance_type} has local NVMe storage ({storage} GB), which SageMaker encrypts itself: it "
                "refuses a volume KMS key (VolumeKmsKeyId) for such a type (API reference, ResourceConfig). Leave "
                f"the KMS key out, or choose a type without local storage: {', '.join(plain)}"
            )
        gpus = int(table.loc[self.instance_type, "gpus"])
        if gpus and self.processes_per_host > gpus:
            raise ValueError(
                f"{self.instance_type} has {gpus} GPU(s): run at most {gpus} processes per host (one per GPU)"
            )

    @property
    def ranks(self) -> int:
        """Processes the job should run in all: instances × processes per host."""
        return self.instances * self.processes_per_host

    @property
    def max_wait_seconds(self) -> int | None:
        """MaxWaitTimeInSeconds: set for spot (twice the runtime unless given), absent otherwise."""
        if not self.spot:
            return None
        return int(round((self.max_wait_hours or 2 * self.max_hours) * 3600))

    @property
    def with_checkpoints(self) -> bool:
        """Spot jobs always checkpoint: an interrupted job without checkpoints starts again from scratch."""
        return self.checkpoints or self.spot


# ----------------------------------------------------------------------------------------------------
# Prices and the cost guard


def prices(path: Path | None = None) -> pd.DataFrame:
    """The price file, indexed by instance type."""
    path = Path(path or PRICE_FILE)
    if not Path(path).is_file():
        raise FileNotFoundError(f"the price file {path} is missing: it ships with the course (data/)")
    return pd.read_csv(path).set_index("instance_type")


def price(instance_type: str, path: Path | None = None, region: str = REGION) -> float:
    """On-demand US dollars per hour of one instance of `instance_type` in `region`; a type or region with no
    recorded price is an error, never another region's price."""
    path = Path(path or PRICE_FILE)
    table = prices(path)
    if instance_type not in table.index:
        raise ValueError(
            f"no price for instance type {instance_type!r} in {path}: use one of {', '.join(table.index)}, "
            "or add a row for it with its source"
        )
    recorded = str(table.loc[instance_type, "region"])
    if recorded != region:
        raise ValueError(
            f"the price of {instance_type} recorded in {path} is {recorded}'s, not {region}'s (prices differ by "
            f"region): add a row for {region} with its source (https://aws.amazon.com/sagemaker-ai/pricing/), or "
            f"price the job in {recorded}"
        )
    return float(table.loc[instance_type, "usd_per_hour"])


@dataclass
class CostEstimate:
    """The most a job can cost: every instance billed for the whole maximum runtime, at the on-demand rate."""

    instance_type: str
    instances: int
    max_hours: float
    usd_per_hour: float
    spot: bool
    keep_alive_hours: float = 0.0  # a managed warm pool's instances, billed while kept after the job

    @property
    def worst_case_usd(self) -> float:
        """Instances × (hours + warm-pool hours) × on-demand rate: a spot job is billed at most this."""
        return self.instances * (self.max_hours + self.keep_alive_hours) * self.usd_per_hour

    def line(self) -> str:
        kind = " (managed spot: billed at the spot price, at most this)" if self.spot else ""
        kept = f" + {self.keep_alive_hours * 60:g} min kept in a warm pool" if self.keep_alive_hours else ""
        return (
            f"{self.instances} × {self.instance_type} at ${self.usd_per_hour:.3f}/h for at most "
            f"{self.max_hours:g} h{kept} = at most ${self.worst_case_usd:,.2f}{kind}"
        )


def estimate(request: Mapping[str, Any], region: str = REGION) -> CostEstimate:
    """The cost bound of a captured CreateTrainingJob request in `region` (its instances, MaxRuntimeInSeconds, which
    covers every retry of a RetryStrategy, and a warm pool's KeepAlivePeriodInSeconds)."""
    resources = request["ResourceConfig"]
    return CostEstimate(
        instance_type=resources["InstanceType"],
        instances=int(resources["InstanceCount"]),
        max_hours=request["StoppingCondition"]["MaxRuntimeInSeconds"] / 3600,
        usd_per_hour=price(resources["InstanceType"], region=region),
        spot=bool(request.get("EnableManagedSpotTraining")),
        keep_alive_hours=resources.get("KeepAlivePeriodInSeconds", 0) / 3600,
    )


class CostLimitError(RuntimeError):
    """A job whose worst-case cost is above the limit the learner set."""


def check_limit(limit_usd: Any) -> float:
    """`limit_usd` as a number, or an error that says what a cost limit is."""
    if isinstance(limit_usd, bool) or not isinstance(limit_usd, (int, float)) or not limit_usd > 0:
        raise ValueError(
            f"the cost limit must be a positive number of US dollars (the most you accept the job to cost), "
            f"got {limit_usd!r}"
        )
    return float(limit_usd)


def check_cost(request: Mapping[str, Any], limit_usd: float, region: str = REGION) -> CostEstimate:
    """Refuse a job that could cost more than `limit_usd` in `region`; return its estimate otherwise."""
    check_limit(limit_usd)
    if "MaxRuntimeInSeconds" not in request.get("StoppingCondition", {}):
        raise CostLimitError("the request sets no MaxRuntimeInSeconds: a job without one has no cost bound")
    found = estimate(request, region)
    if found.worst_case_usd > limit_usd:
        raise CostLimitError(
            f"refused: {found.line()}, above your limit of ${limit_usd:,.2f}. Lower max_hours or the number "
            "of instances, choose a cheaper instance type, or raise the limit if you mean it."
        )
    return found


def spot_savings(billable_seconds: float, training_seconds: float) -> float:
    """SageMaker's managed-spot savings: 1 − BillableTimeInSeconds / TrainingTimeInSeconds."""
    if training_seconds <= 0 or billable_seconds < 0:
        raise ValueError("training time must be positive and billable time not negative (seconds)")
    return 1 - billable_seconds / training_seconds


# ----------------------------------------------------------------------------------------------------
# Offline AWS: moto, a guard on the network, the request captured


class NetworkGuard:
    """Block and record every connection (and name lookup) to an address that is not this machine.

    A Python audit hook sees each `socket.connect` and `socket.getaddrinfo` of this process; loopback
    addresses and local names pass, anything else raises `PermissionError` before a packet is sent.
    Audit hooks cannot be removed, so `close()` only stops it from blocking.
    """

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self.active = True
        sys.addaudithook(self._hook)

    @staticmethod
    def _local(host: Any) -> bool:
        if host is None:
            return True
        host = host.decode() if isinstance(host, bytes) else str(host)
        if host in ("localhost", "", socket.gethostname()) or host.endswith(".localhost"):
            return True
        try:
            import ipaddress

            return ipaddress.ip_address(host.split("%")[0]).is_loopback
        except ValueError:
            return False

    def _hook(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event == "socket.connect":
            address = args[1]
            if isinstance(address, tuple) and not self._local(address[0]):
                self._refuse(f"connect {address[0]}:{address[1]}")
        elif event == "socket.getaddrinfo" and not self._local(args[0]):
            self._refuse(f"name lookup {args[0]}")

    def _refuse(self, what: str) -> None:
        self.attempts.append(what)
        raise PermissionError(f"offline lesson: {what} refused (nothing may leave this machine)")

    def close(self) -> None:
        self.active = False


@dataclass
class OfflineAWS:
    """moto's emulated AWS: a boto3 session, S3, a SageMaker SDK session, and every captured request."""

    boto: Any
    session: Any
    s3: Any
    bucket: str
    region: str
    requests: list[dict] = field(default_factory=list)
    work: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="course-sagemaker-")))
    closed: bool = False  # set when offline_aws() has ended: moto and its fake credentials are gone

    def upload_dataset(
        self, path: Path | None = None, prefix: str = "data/train", parts: int = 1, hours: int | None = None
    ) -> str:
        """Put the course's series CSV (its first `hours` rows, in `parts` files) under `prefix`; return the URI."""
        source = Path(path) if path else REPO_ROOT / "data" / "seattle_hourly_temperature_2010.csv"
        lines = source.read_text().splitlines(keepends=True)
        header, rows = lines[0], lines[1:][:hours]
        size = math.ceil(len(rows) / parts)
        for i in range(parts):
            body = header + "".join(rows[i * size : (i + 1) * size])
            self.s3.put_object(Bucket=self.bucket, Key=f"{prefix}/part-{i:03d}.csv", Body=body.encode())
        return f"s3://{self.bucket}/{prefix}"

    def read_uploaded(self, request: Mapping[str, Any], channel: str, name: str) -> str:
        """A file ModelTrainer uploaded for a job's channel (e.g. 'sm_drivers', 'distributed.json')."""
        uri = next(c for c in request["InputDataConfig"] if c["ChannelName"] == channel)
        bucket, _, prefix = uri["DataSource"]["S3DataSource"]["S3Uri"][len("s3://") :].partition("/")
        return self.s3.get_object(Bucket=bucket, Key=f"{prefix}/{name}")["Body"].read().decode()


_OFFLINE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "SAGEMAKER_VALIDATE_ROLE": "false",  # no iam:SimulatePrincipalPolicy (moto lacks it; a full role ARN is given)
    # moto answers calls to AWS's own endpoints: an endpoint set by AWS_ENDPOINT_URL* or a profile would escape it
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true",
    # nor are the learner's ~/.aws files read (one that does not parse would stop the rehearsal)
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


def _sdk_config(folder: Path) -> Path:
    """A SageMaker SDK config file that turns the SDK's telemetry off (it would call AWS from a thread)."""
    path = folder / "sagemaker_config.yaml"
    path.write_text("SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n")
    return path


class AWSStopped(RuntimeError):
    """A request to the emulated AWS after it was stopped: the message says which cell starts it again. In a
    notebook it shows as that message alone, without a traceback (IPython's `_render_traceback_`)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


STOPPED_HELP = (
    'the emulated AWS is stopped: the lesson\'s last cell (stack.close()) stopped it, and "Run All" runs that cell '
    'too. Run the cell that starts it again (it prints "Starting the emulated AWS (moto) ...", at the start of '
    "section 2), then this cell."
)


@contextmanager
def offline_aws(region: str = REGION, bucket: str = BUCKET) -> Iterator[OfflineAWS]:
    """AWS emulated by moto in this process, with fake credentials; the environment is restored afterwards."""
    from moto import mock_aws

    saved = {k: os.environ.get(k) for k in [*_OFFLINE_ENV, "SAGEMAKER_USER_CONFIG_OVERRIDE", "AWS_PROFILE"]}
    work = Path(tempfile.mkdtemp(prefix="course-sagemaker-"))
    os.environ.update(_OFFLINE_ENV, AWS_DEFAULT_REGION=region, SAGEMAKER_USER_CONFIG_OVERRIDE=str(_sdk_config(work)))
    os.environ.pop("AWS_PROFILE", None)
    aws = None
    try:
        with mock_aws():
            import boto3
            from sagemaker.core.helper.session_helper import Session

            boto = boto3.Session(region_name=region)
            s3 = boto.client("s3")
            s3.create_bucket(Bucket=bucket)
            aws = OfflineAWS(boto=boto, session=None, s3=s3, bucket=bucket, region=region, work=work)
            aws.session = Session(boto_session=boto, default_bucket=bucket)
            boto.events.register(
                "before-parameter-build.sagemaker.CreateTrainingJob",
                lambda params, **_: aws.requests.append(copy.deepcopy(params)),
            )
            yield aws
    finally:
        if aws is not None:
            aws.closed = True
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------
# Building the job


def stage_source(kind: str, dest: Path) -> Path:
    """A folder with the kind's training script and the course's `utils` package: the job's source_dir."""
    if kind not in KINDS:
        raise ValueError(f"unknown job kind {kind!r}: choose one of {', '.join(KINDS)}")
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "scripts" / KINDS[kind], dest / KINDS[kind])
    shutil.copytree(REPO_ROOT / "utils", dest / "utils", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def horovod_image(region: str = REGION, account: str = OFFLINE_ACCOUNT) -> str:
    """Where the course's Horovod image (docker/horovod) lives once pushed to an account's ECR."""
    return f"{account}.dkr.ecr.{region}.amazonaws.com/{HOROVOD_REPOSITORY}:{HOROVOD_TAG}"


def stock_image(instance_type: str, region: str = REGION) -> str:
    """AWS's TensorFlow 2.21 training image for this instance type, from the SDK's offline table."""
    from sagemaker.core import image_uris

    return image_uris.retrieve(
        framework="tensorflow",
        region=region,
        version=TF_VERSION,
        py_version=PY_VERSION,
        instance_type=instance_type,
        image_scope="training",
    )


#: What a checkpoint run id may hold: one S3 key segment.
RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def new_run_id() -> str:
    """A run id no earlier job has: the UTC time to the second and 6 random hex digits."""
    import uuid

    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def checkpoint_uri(bucket: str, kind: str, run: str) -> str:
    """The checkpoint prefix of one run of a job kind: s3://<bucket>/checkpoints/course-<kind>/<run>.

    SageMaker copies everything under a job's CheckpointConfig.S3Uri into /opt/ml/checkpoints of every instance of
    every job that names it, a new job as well as a restarted one (AWS, "Resume training from a checkpoint",
    https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints-resume.html). A prefix shared by the jobs of a
    kind would make each job resume the last one's final epoch and train nothing, so each run has its own, and a run
    is resumed only by naming it (JobConfig.resume_run)."""
    return f"s3://{bucket}/checkpoints/course-{kind}/{run}"


def _plain_json(value: Any) -> bool:
    """Whether `value` is made of dicts with string keys, lists, strings, numbers, booleans and None only: what
    `json.dumps` writes back unchanged, so that two values with the same JSON text are the same to a JSON schema."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain_json(v) for v in value)
    return value is None or isinstance(value, (str, int, float, bool))


def validate_sdk_config_once() -> None:
    """Have the SageMaker SDK's `ModelTrainer` validate each distinct defaults config once, not at every lookup.

    While it builds a job, `ModelTrainer` reads about ten settings from the SDK's defaults config through
    `SageMakerConfig.resolve_value_from_config` (sagemaker/core/config/config_manager.py), and at each one
    `get_sagemaker_config_value` validates the whole config against the SDK's JSON schema with `jsonschema.validate`,
    which first checks that schema itself against JSON Schema's own. Measured here (sagemaker 3.27.0, the 2-core AMD
    EPYC machine that runs the course's checks, 2026-11-30), three job requests in one process took 3.1, 2.6 and
    2.4 CPU-s without this, 1.7, 0.9 and 0.7 with it. The course's emulated AWS always has a config (it turns the
    SDK's telemetry off), and a learner's may too.

    After this call, `SageMakerConfig.validate_sagemaker_config` skips a config whose JSON text (keys sorted) equals
    that of one it has already passed in this process; a config that fails is refused as before, every time, and one
    that is not plain JSON (`_plain_json`: tuples, non-string keys, other types) is validated every time. The SDK's
    other validators (`sagemaker.core.config.config.validate_sagemaker_config`, which a new `Session` calls) are left
    as they are. Called by `build_trainer`; calling it again changes nothing."""
    from sagemaker.core.config.config_manager import SageMakerConfig

    original = SageMakerConfig.validate_sagemaker_config  # a staticmethod: the plain function
    if getattr(original, "validated", None) is not None:
        return
    validated: set[str] = set()

    def validate_sagemaker_config(sagemaker_config: dict | None = None) -> None:
        if not _plain_json(sagemaker_config):
            original(sagemaker_config)
            return
        key = json.dumps(sagemaker_config, sort_keys=True)
        if key not in validated:
            original(sagemaker_config)  # raises jsonschema's ValidationError for a config that does not fit
            validated.add(key)

    validate_sagemaker_config.validated = validated
    validate_sagemaker_config.__doc__ = original.__doc__
    SageMakerConfig.validate_sagemaker_config = staticmethod(validate_sagemaker_config)


def build_trainer(
    config: JobConfig,
    session: Any,
    bucket: str,
    source_dir: Path,
    *,
    role: str = OFFLINE_ROLE,
    data_uri: str | None = None,
    account: str = OFFLINE_ACCOUNT,
) -> tuple[Any, list[Any]]:
    """The `ModelTrainer` of `config` and its input channels (the way the lesson shows them)."""
    from sagemaker.core.shapes import Channel, DataSource, S3DataSource
    from sagemaker.core.training.configs import (
        CheckpointConfig,
        Compute,
        Networking,
        OutputDataConfig,
        SourceCode,
        StoppingCondition,
    )
    from sagemaker.train.model_trainer import ModelTrainer

    validate_sdk_config_once()
    with warnings.catch_warnings():  # the SDK's own module still imports its deprecated configs shim
        warnings.filterwarnings("ignore", message="sagemaker.train.configs has been moved", category=DeprecationWarning)
        from sagemaker.train.distributed import MPI

    distributed = None
    if config.kind == "horovod":
        # v3's MPI driver passes -np = processes per host; a later -np (Open MPI: the last one wins) fixes it.
        extra = ["-np", str(config.ranks)] if config.fix_np else []
        distributed = MPI(process_count_per_node=config.processes_per_host, mpi_additional_options=extra)
    hyperparameters = dict(config.hyperparameters)
    if config.with_checkpoints:
        hyperparameters["checkpoint-dir"] = "/opt/ml/checkpoints"
    networking = None
    if config.encrypt or config.network_isolation or config.subnets:
        networking = Networking(
            enable_inter_container_traffic_encryption=config.encrypt or None,
            enable_network_isolation=config.network_isolation or None,
            subnets=list(config.subnets) or None,
            security_group_ids=list(config.security_groups) or None,
        )
    requirements, environment = None, None
    if config.mlflow_arn:  # the container needs the MLflow client and SageMaker's plugin; installed from the source
        from utils import tracking

        environment = tracking.job_environment(config.mlflow_arn, config.mlflow_experiment)
        requirements = "requirements.txt"
        wanted = tracking.job_requirements(config.mlflow_version or tracking.MANAGED_MLFLOW_VERSION)
        (Path(source_dir) / requirements).write_text("\n".join(wanted) + "\n")
    trainer = ModelTrainer(
        sagemaker_session=session,
        role=role,
        base_job_name=f"course-{config.kind}",
        training_image=horovod_image(config.region, account)
        if config.kind == "horovod"
        else stock_image(config.instance_type, config.region),
        source_code=SourceCode(source_dir=str(source_dir), entry_script=KINDS[config.kind], requirements=requirements),
        environment=environment,
        distributed=distributed,
        compute=Compute(
            instance_type=config.instance_type,
            instance_count=config.instances,
            enable_managed_spot_training=config.spot or None,
            volume_kms_key_id=config.kms_key,
            keep_alive_period_in_seconds=config.keep_alive_minutes * 60 or None,
        ),
        networking=networking,
        stopping_condition=StoppingCondition(
            max_runtime_in_seconds=int(round(config.max_hours * 3600)),
            max_wait_time_in_seconds=config.max_wait_seconds,
        ),
        output_data_config=OutputDataConfig(s3_output_path=f"s3://{bucket}/output", kms_key_id=config.kms_key),
        checkpoint_config=CheckpointConfig(
            s3_uri=checkpoint_uri(bucket, config.kind, config.resume_run or new_run_id())
        )
        if config.with_checkpoints
        else None,
        hyperparameters=hyperparameters,
    )
    if config.retries:  # MaxRuntimeInSeconds then bounds every attempt together (API: RetryStrategy)
        from sagemaker.core.training.configs import RetryStrategy

        trainer = trainer.with_retry_strategy(RetryStrategy(maximum_retry_attempts=config.retries))
    if config.infra_check:
        from sagemaker.core.training.configs import InfraCheckConfig

        trainer = trainer.with_infra_check_config(InfraCheckConfig(enable_infra_check=True))
    # A Channel, not InputData: ModelTrainer builds every InputData channel in File mode.
    channel = Channel(
        channel_name="train",
        input_mode=config.input_mode,
        data_source=DataSource(
            s3_data_source=S3DataSource(
                s3_data_type="S3Prefix",
                s3_uri=data_uri or f"s3://{bucket}/data/train",
                s3_data_distribution_type="ShardedByS3Key" if config.sharded else "FullyReplicated",
            )
        ),
    )
    return trainer, [channel]


_last_name: dict[str, float] = {}


def request_for(config: JobConfig, aws: OfflineAWS, *, data_uri: str | None = None) -> dict:
    """Build the job of `config` against moto and return the CreateTrainingJob request the SDK sent."""
    if aws.closed:
        raise AWSStopped(STOPPED_HELP)
    # Job names carry a timestamp to the second: two jobs of one kind in the same second would clash.
    wait = _last_name.get(config.kind, 0) + 1.05 - time.time()
    if wait > 0:
        time.sleep(wait)
    _last_name[config.kind] = time.time()
    source = stage_source(config.kind, aws.work / f"source-{config.kind}")
    trainer, channels = build_trainer(config, aws.session, aws.bucket, source, data_uri=data_uri)
    before = len(aws.requests)
    trainer.train(input_data_config=channels, wait=False, logs=False)
    if len(aws.requests) != before + 1:
        raise RuntimeError("the SDK sent no CreateTrainingJob request: was the job built inside offline_aws()?")
    return copy.deepcopy(aws.requests[-1])


@functools.cache
def keep_alive_max_minutes() -> int:
    """The longest warm pool the API accepts, in minutes: the maximum of ResourceConfig.KeepAlivePeriodInSeconds in
    botocore's SageMaker service model. It was 3600 s until December 2025 and is 21600 s since (botocore 1.42.12);
    the developer guide's page on managed warm pools still says 3600 s. The request is checked as the API checks it."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return int(model.shape_for("KeepAlivePeriodInSeconds").metadata["max"]) // 60


def validate(request: Mapping[str, Any], operation: str = "CreateTrainingJob", service: str = "sagemaker") -> None:
    """Check a request against botocore's published service model (SageMaker's unless told); raise if invalid."""
    import botocore.session
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model(service)
    report = ParamValidator().validate(dict(request), model.operation_model(operation).input_shape)
    if report.has_errors():
        raise ValueError(f"the {operation} request does not match SageMaker's API:\n{report.generate_report()}")
    uri = (request.get("Environment") or {}).get("MLFLOW_TRACKING_URI") if operation == "CreateTrainingJob" else None
    if uri is not None:  # the course's rule, not the API's: a job logs to a managed MLflow server, by its ARN
        from utils import tracking

        try:
            tracking.check_arn(uri)
        except ValueError as err:
            raise ValueError(f"Environment.MLFLOW_TRACKING_URI: {err}") from None
        if request.get("EnableNetworkIsolation"):
            raise ValueError(
                "Environment.MLFLOW_TRACKING_URI: the job runs with EnableNetworkIsolation, so its script cannot "
                "reach the MLflow server: turn one of them off"
            )


def normalized(request: Mapping[str, Any]) -> dict:
    """The request with its timestamped job name replaced by <job> and its checkpoint run id by <run>, so that two
    requests compare field by field."""
    name = request.get("TrainingJobName", "")
    text = json.dumps(request, sort_keys=True, default=str)
    text = re.sub(r'(/checkpoints/course-[a-z]+/)[A-Za-z0-9._-]+"', r'\1<run>"', text)  # a run id of its own
    return json.loads(text.replace(name, "<job>")) if name else json.loads(text)


def request_diff(
    base: Mapping[str, Any], other: Mapping[str, Any], base_name: str = "single", other_name: str = "job"
) -> str:
    """A unified diff of two requests' JSON (job names normalized): what one job changes in the other."""
    a = json.dumps(normalized(base), indent=1, sort_keys=True).splitlines()
    b = json.dumps(normalized(other), indent=1, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(a, b, base_name, other_name, n=1, lineterm=""))


def changed_fields(base: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Every leaf that differs between two requests, as {dotted.path: (base value, other value)}."""

    def leaves(value: Any, path: str = "") -> dict[str, Any]:
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for k, v in value.items():
                out.update(leaves(v, f"{path}.{k}" if path else k))
            return out
        if isinstance(value, list) and value and all(isinstance(v, dict) and "ChannelName" in v for v in value):
            out = {}
            for v in value:
                out.update(leaves(v, f"{path}[{v['ChannelName']}]"))
            return out
        return {path: value}

    a, b = leaves(normalized(base)), leaves(normalized(other))
    return {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def launch_command(request: Mapping[str, Any], aws: OfflineAWS) -> list[str]:
    """The command the job's first instance will run, as SDK v3's drivers build it (the mpirun line for MPI),
    with the container's Python (utils.rehearsal.CONTAINER_PYTHON)."""
    from utils import rehearsal

    sourcecode = json.loads(aws.read_uploaded(request, "sm_drivers", "sourcecode.json"))
    try:
        distributed = json.loads(aws.read_uploaded(request, "sm_drivers", "distributed.json"))
    except aws.s3.exceptions.NoSuchKey:
        distributed = {}
    hosts = [f"algo-{i + 1}" for i in range(request["ResourceConfig"]["InstanceCount"])]
    return rehearsal.driver_command(distributed, sourcecode, hosts, request.get("HyperParameters", {}))


def contract_figure():
    """The training-container contract drawn: what SageMaker puts in /opt/ml and what it takes back to S3."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(11, 5.4))
    ax.set_xlim(0, 11)
    ax.set_ylim(0, 6.2)
    ax.axis("off")

    def box(x, y, w, h, text, color, size=9):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", fc=color, ec="0.3"))
        ax.text(x + 0.12, y + h - 0.12, text, va="top", ha="left", fontsize=size, family="monospace")

    def arrow(a, b, label, above=True):
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=14, color="0.25", lw=1.3))
        if label:
            ax.text(
                (a[0] + b[0]) / 2,
                (a[1] + b[1]) / 2 + (0.22 if above else -0.3),
                label,
                ha="center",
                fontsize=8,
                color="0.2",
                bbox={"fc": "white", "ec": "none", "pad": 1},
            )

    ax.text(0.1, 5.95, "Amazon S3", fontsize=11, weight="bold")
    ax.text(5.4, 5.95, "each instance (algo-1 … algo-H), inside the container", fontsize=11, weight="bold")
    box(
        0.1,
        4.45,
        3.2,
        1.25,
        "s3://bucket/data/train/\n  part-000.csv …\n(FullyReplicated or\n ShardedByS3Key)",
        "#dbe9f6",
    )
    box(0.1, 3.05, 3.2, 1.15, "s3://bucket/<job>/input/\n  code/  sm_drivers/\n(uploaded by ModelTrainer)", "#dbe9f6")
    box(0.1, 1.75, 3.2, 1.0, "s3://bucket/checkpoints/\n  (CheckpointConfig)", "#dbe9f6")
    box(0.1, 0.35, 3.2, 1.1, "s3://bucket/output/<job>/\n  output/model.tar.gz", "#dbe9f6")
    box(
        5.4,
        0.3,
        5.5,
        5.45,
        "/opt/ml/\n"
        "├─ input/config/\n"
        "│   hyperparameters.json  (all strings)\n"
        "│   resourceconfig.json   (hosts, this host)\n"
        "│   inputdataconfig.json  (mode, distribution)\n"
        "├─ input/data/<channel>/  → SM_CHANNEL_<NAME>\n"
        "│   train/  code/  sm_drivers/\n"
        "├─ checkpoints/            <-> S3 while it runs\n"
        "├─ model/                  → SM_MODEL_DIR\n"
        "└─ output/data/  output/failure\n\n"
        "SM_HOSTS, SM_CURRENT_HOST, SM_HPS, …\n"
        "python train.py --epochs 5 --batch-size 64\n"
        "  (hyperparameters as arguments)",
        "#f3f3f3",
        size=8.6,
    )
    arrow((3.35, 5.1), (5.35, 4.05), "downloaded before the script starts")
    arrow((3.35, 3.6), (5.35, 3.7), "")
    arrow((5.35, 2.85), (3.35, 2.25), "synced both ways (spot resume)", above=False)
    arrow((3.35, 2.1), (5.35, 2.7), "")
    arrow((5.35, 2.35), (3.35, 0.95), "uploaded as model.tar.gz at the end", above=False)
    ax.set_title(
        "A training job is a contract of folders: S3 in before the script, /opt/ml/model out after it", fontsize=11
    )
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------------
# Logs and metrics


def metrics_from_log(text: str, definitions: list[dict[str, str]] = METRIC_DEFINITIONS) -> dict[str, list[float]]:
    """What SageMaker would send to CloudWatch: each definition's regex applied to every log line."""
    found: dict[str, list[float]] = {d["Name"]: [] for d in definitions}
    for line in text.splitlines():
        for d in definitions:
            match = re.search(d["Regex"], line)
            if match:
                found[d["Name"]].append(float(match.group(1)))
    return found


# ----------------------------------------------------------------------------------------------------
# Online, only on request


def console_link(job_name: str, region: str) -> str:
    """The AWS console page of a training job."""
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/jobs/{job_name}"


#: IAM role ARNs, as IAM documents them: "arn:partition:iam::account:role/role-name-with-path" ("IAM identifiers",
#: IAM ARNs, https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-arns), with the
#: partitions IAM names there (aws, aws-cn, aws-us-gov), a 12-digit account, and the parts IAM's API allows (CreateRole,
#: https://docs.aws.amazon.com/IAM/latest/APIReference/API_CreateRole.html): RoleName 1-64 characters of [\w+=,.@-]
#: (IAM's \w is ASCII: letters, digits, _), Path "/" alone or "/" + characters ! to ~ + "/", at most 512 characters.
#: The same patterns are botocore's IAM service model's roleNameType and pathType.
ROLE_PARTITIONS = ("aws", "aws-cn", "aws-us-gov")
ROLE_ARN_FORM = (
    "arn:aws:iam::<12-digit account>:role/<name> (or role/<path>/<name>; partition aws, aws-cn or aws-us-gov)"
)
_ROLE_NAME = re.compile(r"[A-Za-z0-9_+=,.@-]{1,64}")
_ROLE_PATH = re.compile(r"/|/[\x21-\x7e]+/")


def role_arn_problem(arn: str) -> str | None:
    """What is wrong with `arn` as an IAM role's ARN (the part that is wrong, in words), or None when nothing is."""
    parts = str(arn).split(":", 5)
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "iam" or parts[3] != "":
        return "it is not an IAM ARN (arn:<partition>:iam::<account>:..., with no region)"
    partition, account, resource = parts[1], parts[4], parts[5]
    if partition not in ROLE_PARTITIONS:
        return f"its partition {partition!r} is not one of {', '.join(ROLE_PARTITIONS)}"
    if not re.fullmatch(r"[0-9]{12}", account):
        return f"its account {account!r} is not a 12-digit account ID"
    kind, slash, rest = resource.partition("/")
    if kind != "role" or not slash:
        return f"it names {resource.split('/')[0]!r}, not a role: a job runs as an execution role, never as a user"
    path, slash, name = rest.rpartition("/")
    path = f"/{path}/" if slash else "/"  # role//R has the path "//", which no role has
    if len(name) > 64:
        return f"its role name is {len(name)} characters long: IAM allows at most 64"
    if not _ROLE_NAME.fullmatch(name):
        return (
            f"its role name {name!r} is empty or has a character IAM does not allow in one "
            "(letters, digits and _+=,.@- only)"
        )
    if len(path) > 512 or not _ROLE_PATH.fullmatch(path):
        return f"its path {path!r} is not an IAM path (at most 512 characters from ! to ~, between slashes)"
    return None


def check_role_arn(arn: str | None, variable: str = "SAGEMAKER_ROLE_ARN") -> str:
    """`arn` if it has the form of an IAM role's ARN; else a PermissionError that says what is wrong, in one line."""
    if not arn:
        raise PermissionError(
            f"set {variable} to the ARN of a SageMaker execution role ({ROLE_ARN_FORM}) before launching online"
        )
    problem = role_arn_problem(arn)
    if problem:
        raise PermissionError(
            f"{variable}={arn!r} is not the ARN of an IAM role: {problem}. Set it to the ARN of a SageMaker "
            f"execution role, {ROLE_ARN_FORM}, as the IAM console shows it on the role's page"
        )
    return arn


#: Set to 1 to let the online path ask an instance metadata service for credentials on a machine that the course
#: does not recognise as an EC2 or SageMaker instance.
IMDS_FLAG = "COURSE_AWS_IMDS"
IMDS_ADDRESS = "169.254.169.254"


def aws_instance(root: Path | str = "/") -> str | None:
    """What kind of AWS instance this machine is, read from its own files (no network), or None if none.

    A SageMaker notebook instance has /opt/ml/metadata/resource-metadata.json (SageMaker Developer Guide, "Get
    notebook instance metadata"); an EC2 instance says "Amazon EC2" as its DMI system vendor (Nitro), has its
    instance ID as DMI board asset tag, or a Xen hypervisor UUID that starts with "ec2" (EC2 User Guide, "Detect
    whether a host is an EC2 instance").
    """
    root = Path(root)
    if (root / "opt/ml/metadata/resource-metadata.json").is_file():
        return "a SageMaker notebook instance"

    def read(relative: str) -> str:
        try:
            return (root / relative).read_text(errors="replace").strip()
        except OSError:
            return ""

    if (
        read("sys/class/dmi/id/sys_vendor") == "Amazon EC2"
        or read("sys/class/dmi/id/board_asset_tag").startswith("i-")
        or read("sys/hypervisor/uuid").lower().startswith("ec2")
    ):
        return "an EC2 instance"
    return None


def credentials_session(region: str = REGION, env: Mapping[str, str] | None = None) -> Any:
    """A boto3 session with AWS credentials for the online path, or a PermissionError that says what to do.

    botocore's credential chain looks in the environment variables, the shared credentials and config files (and
    their profiles: assume-role, SSO, credential_process), container credentials (AWS_CONTAINER_CREDENTIALS_*) and
    web identity, all without the network unless configured to use it, and last in the instance metadata service
    (IMDS) at 169.254.169.254, over the network. On a machine that is not an AWS instance that address does not
    answer, so the chain is run first without its IMDS provider ("iam-role"). IMDS is asked only when nothing else
    gave credentials and this machine is an EC2 or SageMaker notebook instance (whose role's credentials come from
    there), or when COURSE_AWS_IMDS=1; one line on stderr says so. AWS_EC2_METADATA_DISABLED=true, which botocore's
    InstanceMetadataProvider honours, keeps IMDS out in every case.
    """
    env = os.environ if env is None else env
    import boto3
    import botocore.session
    from botocore.exceptions import BotoCoreError

    core = botocore.session.Session()
    try:
        resolver = core.get_component("credential_provider")
        imds = resolver.get_provider("iam-role")
        resolver.remove("iam-role")
        found = core.get_credentials()
        asked, why_not = False, ""
        if found is None:
            where = aws_instance()
            # botocore's InstanceMetadataFetcher reads this variable from os.environ; `env` may say it too
            if any(e.get("AWS_EC2_METADATA_DISABLED", "false").lower() == "true" for e in (os.environ, env)):
                why_not = "AWS_EC2_METADATA_DISABLED=true"
            elif where or env.get(IMDS_FLAG) == "1":
                reason = f"this machine is {where}, whose role provides them" if where else f"{IMDS_FLAG}=1"
                print(
                    f"looking for AWS credentials in the instance metadata service ({IMDS_ADDRESS}): {reason}",
                    file=sys.stderr,
                )
                resolver.providers.append(imds)
                found, asked = core.get_credentials(), True
            else:
                why_not = f"this machine is not an EC2 or SageMaker instance; set {IMDS_FLAG}=1 to ask it anyway"
    except BotoCoreError as exc:  # a profile that is not there, a config file that does not parse, ...
        raise PermissionError(
            f"AWS credentials could not be loaded ({' '.join(str(exc).split())}): check AWS_PROFILE and your "
            "~/.aws/config and ~/.aws/credentials, or run `aws configure`"
        ) from None
    if found is None:
        looked = (
            "environment variables, ~/.aws/credentials and ~/.aws/config (AWS_PROFILE), container and web-identity "
            "settings"
        )
        if asked:
            looked += ", and the instance metadata service (does the instance have a role?)"
        else:
            looked += f"; the instance metadata service was not asked ({why_not})"
        raise PermissionError(
            f"no AWS credentials found (looked in: {looked}): run `aws configure` (or set AWS_PROFILE) on a machine "
            "with an AWS account before launching online; offline, leave COURSE_SAGEMAKER_ONLINE unset"
        )
    return boto3.Session(botocore_session=core, region_name=region)


def check_online_allowed(env: Mapping[str, str] | None = None, region: str = REGION) -> Any:
    """Raise with what to do unless the learner opted in, SAGEMAKER_ROLE_ARN has the form of a role's ARN and AWS
    credentials are available; return a boto3 session with those credentials.

    Everything is checked here, on this machine, before any call to AWS: the role's ARN as a whole (a user's ARN, a
    short account, a bad name would otherwise reach AWS after the code was uploaded), and credentials without the
    network where that is enough (see `credentials_session`).
    """
    env = os.environ if env is None else env
    if env.get(ONLINE_FLAG) != "1":
        raise PermissionError(
            f"online launch is off: set {ONLINE_FLAG}=1 to launch on AWS for real (it costs money; "
            "every job here is also shown offline)"
        )
    check_role_arn(env.get("SAGEMAKER_ROLE_ARN"))
    return credentials_session(region, env)


class OnlineError(RuntimeError):
    """AWS refused a call of the online path, or could not be reached; the message says what to do, in one line."""


#: What to do when AWS refuses a call with one of these error codes.
_AWS_ADVICE = {
    "credentials": (
        "your AWS credentials are not valid here: check them with `aws sts get-caller-identity`, renew them "
        "(`aws configure`, or `aws sso login` for a profile) and try again"
    ),
    "access": (
        "your AWS identity lacks a permission for this call: ask your account's administrator for it (your user's "
        "IAM policy, and SAGEMAKER_ROLE_ARN's role for the job), then try again"
    ),
    "quota": (
        "your account's quota for this instance type is too low: ask for more in the Service Quotas console "
        "(Amazon SageMaker, training job usage), or choose another instance type"
    ),
}
_CREDENTIAL_CODES = ("InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch", "ExpiredToken")


def aws_error_line(exc: Exception, region: str = REGION) -> str:
    """One line that says what an AWS error means for the online path and what to do about it."""
    from boto3.exceptions import S3UploadFailedError
    from botocore import exceptions

    if isinstance(exc, S3UploadFailedError) and isinstance(exc.__context__, exceptions.ClientError):
        exc = exc.__context__  # boto3's upload raises its own error in place of S3's refusal
    if isinstance(exc, exceptions.ClientError):
        error = exc.response.get("Error", {})
        code, said = error.get("Code", "?"), " ".join(str(error.get("Message", "")).split())
        if code.startswith(_CREDENTIAL_CODES):
            advice = _AWS_ADVICE["credentials"]
        elif "AccessDenied" in code or code == "UnauthorizedOperation":
            advice = _AWS_ADVICE["access"]
        elif code == "ResourceLimitExceeded":
            advice = _AWS_ADVICE["quota"]
        else:
            advice = "read AWS's reason, fix the job's settings, and check your credentials with `aws sts get-caller-identity`"
        return f"AWS refused {exc.operation_name} ({code}: {said}): {advice}"
    if isinstance(exc, exceptions.NoCredentialsError):
        return "no AWS credentials found: run `aws configure` (or set AWS_PROFILE) before launching online"
    if isinstance(exc, (exceptions.EndpointConnectionError, exceptions.ConnectionError)):
        return (
            f"could not reach AWS ({' '.join(str(exc).split())}): check this machine's network connection (and proxy) "
            f"and the region ({region}), then try again"
        )
    return f"the call to AWS failed ({type(exc).__name__}: {' '.join(str(exc).split())}); nothing was started"


def launch_online(
    config: JobConfig, limit_usd: float, *, bucket: str | None = None, data_uri: str | None = None
) -> dict:
    """Launch the job on AWS for real, under the cost guard; return the request sent and the job's name.

    Everything that needs no network comes first: the limit, the job's worst case against it (on the same
    request built offline), the opt-in, the role's ARN and credentials (found without the network except on
    AWS's own instances, `credentials_session`). An AWS error becomes an `OnlineError` whose one-line message
    says what to do.
    """
    limit_usd = check_limit(limit_usd)
    with offline_aws(config.region) as aws:
        check_cost(request_for(config, aws, data_uri=data_uri), limit_usd, config.region)
    boto = check_online_allowed(region=config.region)
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import BotoCoreError, ClientError
    from sagemaker.core.helper.session_helper import Session

    try:
        account = boto.client("sts").get_caller_identity()["Account"]
        session = Session(boto_session=boto, default_bucket=bucket)
        bucket = bucket or session.default_bucket()
        sent: list[dict] = []
        boto.events.register(
            "before-parameter-build.sagemaker.CreateTrainingJob",
            lambda params, **_: sent.append(copy.deepcopy(params)),
        )
        # the SDK has uploaded the staged source to S3 before it sends the request: the local copy can go after
        with tempfile.TemporaryDirectory(prefix="course-source-") as staging:
            source = stage_source(config.kind, Path(staging) / "source")
            trainer, channels = build_trainer(
                config,
                session,
                bucket,
                source,
                role=os.environ["SAGEMAKER_ROLE_ARN"],
                data_uri=data_uri,
                account=account,
            )
            trainer.train(input_data_config=channels, wait=False, logs=False)
    except (BotoCoreError, ClientError, S3UploadFailedError) as exc:  # boto3 wraps an upload's ClientError
        raise OnlineError(aws_error_line(exc, config.region)) from None
    name = sent[-1]["TrainingJobName"]
    print(f"started {name}: {console_link(name, config.region)}")
    print(f"stop it with: aws sagemaker stop-training-job --training-job-name {name} --region {config.region}")
    print(
        f"clean up: aws s3 rm --recursive s3://{bucket}/course-{config.kind}/{name}/ "
        f"and s3://{bucket}/output/{name}/ once you have the model"
    )
    if "CheckpointConfig" in sent[-1]:
        uri = sent[-1]["CheckpointConfig"]["S3Uri"]
        print(
            f"checkpoints: {uri} (resume this run on purpose with resume_run={uri.rsplit('/', 1)[-1]!r}; "
            "a new job gets a prefix of its own); delete them with aws s3 rm --recursive once it is done"
        )
    return {"request": sent[-1], "job_name": name}


MLFLOW_PRICE_FILE = REPO_ROOT / "data" / "mlflow_prices.csv"


def mlflow_server_request(
    name: str,
    role_arn: str,
    artifact_uri: str,
    size: str = "Small",
    region: str = REGION,
    mlflow_version: str | None = None,
) -> dict:
    """The CreateMlflowTrackingServer request of a managed MLflow tracking server, checked against botocore's
    model (name, S3 artifact store, role, size, MLflow version) before anything is sent. The version is set, never
    left to AWS's default, and is one AWS pairs with a client (tracking.MANAGED_MLFLOW_VERSION unless given): give
    the jobs the same version as JobConfig(mlflow_version=), which installs that client."""
    from utils import tracking

    request = {"TrackingServerName": name, "ArtifactStoreUri": artifact_uri, "RoleArn": role_arn}
    version = mlflow_version or tracking.MANAGED_MLFLOW_VERSION
    request["TrackingServerSize"], request["MlflowVersion"] = size, version
    validate(request, "CreateMlflowTrackingServer")
    import botocore.session

    shape = botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateMlflowTrackingServer")
    for key, value in request.items():  # botocore's validator checks types and lengths; the API also its patterns
        member = shape.input_shape.members[key]
        if member.enum and value not in member.enum:
            raise ValueError(
                f"CreateMlflowTrackingServer: {key} must be one of {', '.join(member.enum)}, got {value!r}"
            )
        pattern = member.metadata.get("pattern")
        if pattern and not re.fullmatch(pattern, value):
            raise ValueError(f"CreateMlflowTrackingServer: {key} {value!r} does not match the API's pattern {pattern}")
    return request


def aws_pairs_mlflow(version: str) -> bool:
    """Whether AWS's page pairs a client with tracking-server `version` (its major.minor in
    tracking.AWS_PAIRED_MLFLOW)."""
    from utils import tracking

    try:
        tracking.paired_client(version)
    except ValueError:
        return False
    return True


def mlflow_app_request(name: str, role_arn: str, artifact_uri: str, *, account_default: bool = False) -> dict:
    """The CreateMlflowApp request of a serverless MLflow App, checked against botocore's model and the API's patterns
    before anything is sent. An App has no size and no version to choose: AWS runs it (DescribeMlflowApp reports
    its MlflowVersion); `account_default` makes it the account's default MLflow App (AccountDefaultStatus)."""
    request = {"Name": name, "ArtifactStoreUri": artifact_uri, "RoleArn": role_arn}
    request["AccountDefaultStatus"] = "ENABLED" if account_default else "DISABLED"
    validate(request, "CreateMlflowApp")
    import botocore.session

    shape = botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateMlflowApp")
    for key, value in request.items():
        member = shape.input_shape.members[key]
        pattern = member.metadata.get("pattern")
        if member.enum and value not in member.enum:
            raise ValueError(f"CreateMlflowApp: {key} must be one of {', '.join(member.enum)}, got {value!r}")
        if pattern and not re.fullmatch(pattern, value):
            raise ValueError(f"CreateMlflowApp: {key} {value!r} does not match the API's pattern {pattern}")
    return request


def mlflow_server_cost(
    size: str, hours: float, region: str = REGION, usd_per_hour: float | None = None, path: Path | None = None
) -> float:
    """The most `hours` of a tracking server of `size` cost: at `usd_per_hour` if given, else at the price recorded
    for that size and region (data/mlflow_prices.csv); no recorded price is an error, never a guess."""
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not hours > 0:
        raise ValueError(f"hours must be a positive number (how long the server may run), got {hours!r}")
    if usd_per_hour is None:
        table = pd.read_csv(path or MLFLOW_PRICE_FILE)
        row = table[(table["size"] == size) & (table["region"] == region)]
        if row.empty:
            known = ", ".join(f"{r.size} in {r.region}" for r in table.itertuples())
            raise ValueError(
                f"no recorded price for a {size} tracking server in {region} (recorded: {known}): read it on "
                "https://aws.amazon.com/sagemaker-ai/pricing/ and pass usd_per_hour="
            )
        usd_per_hour = float(row["usd_per_hour"].iloc[0])
    return float(usd_per_hour) * float(hours)


def create_mlflow_server_online(
    name: str,
    artifact_uri: str,
    limit_usd: float,
    hours: float,
    *,
    size: str = "Small",
    region: str = REGION,
    usd_per_hour: float | None = None,
    mlflow_version: str | None = None,
) -> str:
    """Create a managed MLflow tracking server on AWS, only with the opt-in and when the `hours` you plan fit the
    limit; return its ARN. Nothing stops it after those hours: it bills until it is stopped or deleted, and the
    stop and delete commands are printed. Its MLflow version is tracking.MANAGED_MLFLOW_VERSION unless
    `mlflow_version` is given: give the jobs the same (JobConfig(mlflow_version=)), which installs its client."""
    limit_usd = check_limit(limit_usd)
    role = os.environ.get("SAGEMAKER_ROLE_ARN", f"arn:aws:iam::{OFFLINE_ACCOUNT}:role/CourseMlflowRole")
    mlflow_server_request(name, role, artifact_uri, size, region, mlflow_version)
    cost = mlflow_server_cost(size, hours, region, usd_per_hour)
    if cost > limit_usd:
        raise CostLimitError(
            f"a {size} MLflow tracking server for the {hours:g} h you plan costs ${cost:,.2f}, above your limit of "
            f"${limit_usd:,.2f}: plan fewer hours, or raise the limit"
        )
    boto = check_online_allowed(region=region)
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        client = boto.client("sagemaker")
        arn = client.create_mlflow_tracking_server(
            **mlflow_server_request(name, os.environ["SAGEMAKER_ROLE_ARN"], artifact_uri, size, region, mlflow_version)
        )["TrackingServerArn"]
    except (BotoCoreError, ClientError) as exc:
        raise OnlineError(aws_error_line(exc, region)) from None
    print(
        f"created {arn}: ${cost:,.2f} for the {hours:g} h you plan; it bills until you stop it, not after {hours:g} h"
    )
    print(f"stop it with: aws sagemaker stop-mlflow-tracking-server --tracking-server-name {name} --region {region}")
    print(
        f"delete it with: aws sagemaker delete-mlflow-tracking-server --tracking-server-name {name} --region {region}"
    )
    return arn


def replace_config(config: JobConfig, **changes: Any) -> JobConfig:
    """A copy of `config` with some fields changed (validated again)."""
    return replace(config, **changes)
