"""Build one of the course's SageMaker training jobs and show it; launch it only when asked.

    python scripts/sagemaker_job.py horovod --instances 2 --processes-per-host 4 --instance-type ml.g4dn.12xlarge --spot

Offline (the default) the real SageMaker SDK v3 builds the job against an emulated AWS (moto) on this
machine and the command prints, as one JSON document: the exact CreateTrainingJob request (checked
against botocore's SageMaker service model), the command the job's first instance will run (the
`mpirun` line for Horovod) with its rank count, and the job's worst-case cost from
data/instance_prices.csv. Nothing leaves the machine.

With --online (and AWS credentials, COURSE_SAGEMAKER_ONLINE=1 and SAGEMAKER_ROLE_ARN set) the same job
is launched on AWS, but only if its worst-case cost is under --limit-usd; that is checked before any call
to AWS, and an error from AWS is reported in one line that says what to do. So are the role's ARN (its
whole form: arn:aws:iam::<12-digit account>:role/<name>) and the credentials, which are looked for without
the network (the instance metadata service, 169.254.169.254, is asked only on an EC2 or SageMaker notebook
instance, or with COURSE_AWS_IMDS=1). A job has at most 20 instances, SageMaker's default quota per training
job; pass --instance-quota if your account's quota was raised.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from utils import rehearsal, sagemaker_job  # importable anywhere: tools/link_utils.py puts the course on the path


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("kind", choices=list(sagemaker_job.KINDS), help="which training script the job runs")
    p.add_argument("--instances", type=int, default=1, help="instances (hosts) of the job")
    p.add_argument(
        "--instance-quota",
        type=int,
        default=sagemaker_job.INSTANCES_PER_JOB_QUOTA,
        help="your account's quota 'Maximum number of instances per training job' (default: AWS's default, %(default)s)",
    )
    p.add_argument("--processes-per-host", type=int, default=1, help="Horovod ranks per instance (one per GPU)")
    p.add_argument("--instance-type", default="ml.g5.2xlarge", help="a type listed in data/instance_prices.csv")
    p.add_argument("--spot", action="store_true", help="managed spot training (checkpoints on)")
    p.add_argument("--max-hours", type=float, default=1.0, help="MaxRuntimeInSeconds, in hours (always set)")
    p.add_argument("--max-wait-hours", type=float, default=None, help="spot only: MaxWaitTimeInSeconds, in hours")
    p.add_argument("--input-mode", choices=sagemaker_job.INPUT_MODES, default="File")
    p.add_argument("--sharded", action="store_true", help="ShardedByS3Key: each instance gets 1/H of the files")
    p.add_argument("--encrypt", action="store_true", help="encrypt traffic between instances")
    p.add_argument("--network-isolation", action="store_true")
    p.add_argument("--subnets", nargs="*", default=[], help="VPC subnet ids (with --security-groups)")
    p.add_argument("--security-groups", nargs="*", default=[])
    p.add_argument(
        "--kms-key", default=None, help="KMS key ARN for the volume and the output (types without local storage)"
    )
    p.add_argument("--checkpoints", action="store_true", help="sync /opt/ml/checkpoints to S3")
    p.add_argument(
        "--resume-run",
        default="",
        help="resume an earlier run on purpose: the run id at the end of its checkpoint prefix (default: a new one)",
    )
    p.add_argument("--keep-alive-minutes", type=int, default=0, help="managed warm pool: minutes kept after the job")
    p.add_argument("--retries", type=int, default=0, help="RetryStrategy: restarts after an internal error (0-30)")
    p.add_argument("--infra-check", action="store_true", help="InfraCheckConfig: health checks before training")
    p.add_argument("--no-np-fix", action="store_true", help="Horovod: keep SDK v3's -np bug (for comparison)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--online", action="store_true", help="launch on AWS for real (needs the opt-in, see above)")
    p.add_argument("--limit-usd", type=float, default=None, help="--online: refuse a job that could cost more")
    return p.parse_args(argv)


def config_from(args: argparse.Namespace) -> sagemaker_job.JobConfig:
    return sagemaker_job.JobConfig(
        kind=args.kind,
        instances=args.instances,
        instance_quota=args.instance_quota,
        processes_per_host=args.processes_per_host,
        instance_type=args.instance_type,
        spot=args.spot,
        max_hours=args.max_hours,
        max_wait_hours=args.max_wait_hours,
        input_mode=args.input_mode,
        sharded=args.sharded,
        encrypt=args.encrypt,
        network_isolation=args.network_isolation,
        subnets=tuple(args.subnets),
        security_groups=tuple(args.security_groups),
        kms_key=args.kms_key,
        checkpoints=args.checkpoints,
        resume_run=args.resume_run,
        keep_alive_minutes=args.keep_alive_minutes,
        retries=args.retries,
        infra_check=args.infra_check,
        fix_np=not args.no_np_fix,
        hyperparameters={"epochs": args.epochs, "batch-size": args.batch_size},
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        config = config_from(args)
        if args.online:
            if args.limit_usd is None:
                raise ValueError("--online needs --limit-usd: the most you accept this job to cost, in US dollars")
            sagemaker_job.launch_online(config, args.limit_usd)
            return 0
        with sagemaker_job.offline_aws() as aws:
            request = sagemaker_job.request_for(config, aws)
            sagemaker_job.validate(request)
            command = sagemaker_job.launch_command(request, aws)
        cost = sagemaker_job.estimate(request)
        print(
            json.dumps(
                {
                    "request": request,
                    "launch_command": shlex.join(command),
                    "ranks": rehearsal.ranks_in(command),
                    "ranks_wanted": config.ranks,
                    "worst_case_usd": round(cost.worst_case_usd, 2),
                    "cost": cost.line(),
                },
                indent=1,
                default=str,
            )
        )
        return 0
    except (ValueError, PermissionError, sagemaker_job.CostLimitError, sagemaker_job.OnlineError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
