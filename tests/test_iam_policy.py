"""The least-privilege policy for the course's online path: valid IAM, and it allows every call that path makes.

`scripts/iam/course-online-policy.json` replaces the AdministratorAccess that older workshop material attaches
to a notebook's role. The calls are not listed by hand: the online launch (`sagemaker_job.launch_online`) runs
for real against moto's emulated AWS and every API call it makes is recorded; the ECR calls are read from
`docker/horovod/build_and_push.sh`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import re
import tempfile
from types import SimpleNamespace

import botocore.client
import pytest

from utils import paths
from utils import sagemaker_job as sj

POLICY = paths.SCRIPTS / "iam" / "course-online-policy.json"
ACCOUNT, REGION, ROLE = "123456789012", "us-east-1", "CourseSageMakerExecution"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{ROLE}"
#: Calls whose IAM action is not "<service>:<operation>" (AWS's service authorization reference).
ACTION_OF = {("s3", "HeadBucket"): "s3:ListBucket", ("s3", "ListBuckets"): "s3:ListAllMyBuckets"}
#: sts:GetCallerIdentity needs no permission (AWS STS API reference: "No permissions are required").
NEEDS_NO_PERMISSION = {("sts", "GetCallerIdentity")}


def policy(account: str = ACCOUNT, region: str = REGION, role: str = ROLE) -> dict:
    """The policy file with its placeholders filled in."""
    text = POLICY.read_text().replace("ACCOUNT_ID", account).replace("REGION", region)
    return json.loads(text.replace("EXECUTION_ROLE_NAME", role))


def allows(doc: dict, action: str, resource: str, context: dict[str, str] | None = None) -> bool:
    """True when an Allow statement of `doc` matches the action, the resource and its StringEquals conditions."""
    for st in doc["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        conditions = st.get("Condition", {}).get("StringEquals", {})
        if (
            st["Effect"] == "Allow"
            and any(fnmatch.fnmatchcase(action, a) for a in actions)
            and any(fnmatch.fnmatchcase(resource, r) for r in resources)
            and all((context or {}).get(k) == v for k, v in conditions.items())
        ):
            return True
    return False


def test_the_policy_is_valid_iam(monkeypatch):
    from moto import mock_aws

    for key, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        import boto3

        iam = boto3.client("iam")
        created = iam.create_policy(PolicyName="course-online", PolicyDocument=json.dumps(policy()))  # validates
        assert created["Policy"]["PolicyName"] == "course-online"
        with pytest.raises(iam.exceptions.MalformedPolicyDocumentException):  # the validator does refuse
            iam.create_policy(PolicyName="broken", PolicyDocument=json.dumps({"Version": "2012-10-17"}))


def test_only_actions_without_resource_level_permissions_get_every_resource():
    doc = policy()
    assert all(st["Effect"] == "Allow" and st.get("Sid") for st in doc["Statement"])
    broad = {
        a
        for st in doc["Statement"]
        if st["Resource"] == "*"
        for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
    }
    assert broad == {"s3:ListAllMyBuckets", "ecr:GetAuthorizationToken"}
    assert not any("*" in a for st in doc["Statement"] for a in json.dumps(st["Action"]).split('"')[1::2])
    # the role may be passed to SageMaker only, and only that one role
    assert allows(doc, "iam:PassRole", ROLE_ARN, {"iam:PassedToService": "sagemaker.amazonaws.com"})
    assert not allows(doc, "iam:PassRole", ROLE_ARN, {"iam:PassedToService": "ec2.amazonaws.com"})
    assert not allows(
        doc, "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/Admin", {"iam:PassedToService": "sagemaker.amazonaws.com"}
    )
    assert not allows(doc, "sagemaker:CreateTrainingJob", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/other")
    assert not allows(doc, "s3:GetObject", f"arn:aws:s3:::sagemaker-{REGION}-{ACCOUNT}/someone-else/x")


def _resource(service: str, params: dict) -> str:
    if service == "s3":
        return f"arn:aws:s3:::{params['Bucket']}" + (f"/{params['Key']}" if "Key" in params else "")
    if service == "sagemaker":
        return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{params['TrainingJobName']}"
    if service == "iam":
        return params["PolicySourceArn"]
    return "*"


@pytest.fixture(scope="module")
def online_launch(tmp_path_factory):
    """One online launch, made against moto: every API call it made (service, operation, params), and what it left
    in the temporary folder (its own, for the launch)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        scratch = tmp_path_factory.mktemp("tmp")
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))
        calls = _launch_and_record(monkeypatch)
        return SimpleNamespace(calls=calls, left=sorted(p.name for p in scratch.iterdir()))


def _launch_and_record(monkeypatch):
    from moto import mock_aws

    calls, guard = [], []  # guard: inside the cost guard's own emulated AWS, whose calls never reach AWS
    real_call, real_offline = botocore.client.BaseClient._make_api_call, sj.offline_aws

    def record(client, operation, params):
        if not guard:
            calls.append((client.meta.service_model.service_name, operation, dict(params)))
        return real_call(client, operation, params)

    @contextlib.contextmanager
    def marked_offline(*args, **kwargs):
        guard.append(True)
        try:
            with real_offline(*args, **kwargs) as aws:
                yield aws
        finally:
            guard.pop()

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", record)
    monkeypatch.setattr(sj, "offline_aws", marked_offline)
    env = {
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_DEFAULT_REGION": REGION,
        sj.ONLINE_FLAG: "1",
        "SAGEMAKER_ROLE_ARN": ROLE_ARN,
        # the role resolver's own check calls iam:SimulatePrincipalPolicy, which moto lacks; ModelTrainer still
        # makes that call once (it tolerates the failure), so the action is recorded below
        "SAGEMAKER_VALIDATE_ROLE": "false",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        config = sj.JobConfig(kind="mwms", instances=2, instance_type="ml.m5.xlarge", max_hours=0.5)
        sj.launch_online(config, limit_usd=1.0)
    return calls


def test_the_policy_allows_every_call_of_the_online_launch(online_launch):
    recorded_calls = online_launch.calls
    doc = policy()
    operations = {(s, op) for s, op, _ in recorded_calls}
    assert {("sagemaker", "CreateTrainingJob"), ("s3", "PutObject"), ("iam", "SimulatePrincipalPolicy")} <= operations
    refused = []
    for service, operation, params in recorded_calls:
        if (service, operation) in NEEDS_NO_PERMISSION:
            continue
        action = ACTION_OF.get((service, operation), f"{service}:{operation}")
        resource = "*" if (service, operation) == ("s3", "ListBuckets") else _resource(service, params)
        if not allows(doc, action, resource):
            refused.append((action, resource))
    assert not refused, f"the policy refuses calls the online launch makes: {sorted(set(refused))[:5]}"
    create = next(p for s, op, p in recorded_calls if op == "CreateTrainingJob")
    assert create["RoleArn"] == ROLE_ARN
    assert allows(doc, "iam:PassRole", create["RoleArn"], {"iam:PassedToService": "sagemaker.amazonaws.com"})


def test_the_online_launch_leaves_nothing_in_the_temporary_folder(online_launch):
    # the job's source folder is staged for the upload only: S3 holds it before the request is sent
    assert online_launch.calls, "the launch made no call"
    assert online_launch.left == [], f"left in the temporary folder: {online_launch.left}"


def test_the_policy_allows_the_image_build_and_push():
    doc = policy()
    script = (paths.REPO_ROOT / "docker" / "horovod" / "build_and_push.sh").read_text()
    repo = re.search(r'repo="\$\{REPO:-([\w-]+)\}"', script).group(1)
    commands = set(re.findall(r"\baws ecr ([a-z-]+)", script))
    assert commands == {"get-login-password", "describe-repositories", "create-repository"}, commands
    own = f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/{repo}"
    assert allows(doc, "ecr:GetAuthorizationToken", "*")  # what get-login-password calls
    for command in commands - {"get-login-password"}:
        assert allows(doc, "ecr:" + command.title().replace("-", ""), own), command
    # docker push and pull (Amazon ECR User Guide, the IAM permissions for pushing and pulling an image)
    push = ["BatchCheckLayerAvailability", "InitiateLayerUpload", "UploadLayerPart", "CompleteLayerUpload", "PutImage"]
    assert all(allows(doc, f"ecr:{a}", own) for a in push)
    base = f"arn:aws:ecr:{REGION}:763104351884:repository/tensorflow-training"  # FROM in docker/horovod/Dockerfile
    assert all(allows(doc, f"ecr:{a}", base) for a in ("BatchGetImage", "GetDownloadUrlForLayer"))
    assert not allows(doc, "ecr:PutImage", base), "nothing may be pushed to AWS's repository"
