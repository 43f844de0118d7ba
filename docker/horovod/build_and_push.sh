#!/usr/bin/env bash
# Builds docker/horovod/Dockerfile (AWS's TensorFlow 2.21 GPU training image plus Horovod built with NCCL
# and MPI), pushes it to your own Amazon ECR repository, and prints the URI to pass to ModelTrainer as
# training_image. See docker/horovod/README.md.
#
#   bash docker/horovod/build_and_push.sh --account 123456789012 --region us-east-1 [--repo NAME] [--tag TAG]
#   bash docker/horovod/build_and_push.sh --dry-run --account 123456789012 --region us-east-1
#
# --dry-run prints the commands and runs none of them (it needs neither docker nor aws).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Shown relative to the current folder when under it (the printed commands are then shorter and still work).
case "$here" in
  "$PWD") here=. ;;
  "$PWD"/*) here="${here#"$PWD"/}" ;;
esac
dockerfile="$here/Dockerfile"
# AWS's account for Deep Learning Container images in the 16 regions that every account has enabled
# (sagemaker-core's image_uri_config/tensorflow.json, TF 2.21.0 training). Opt-in, GovCloud and China
# regions use other accounts: there, pass the URI that sagemaker.core.image_uris.retrieve gives with --base-image.
dlc_account=763104351884
dlc_regions=" ap-northeast-1 ap-northeast-2 ap-south-1 ap-southeast-1 ap-southeast-2 ca-central-1 eu-central-1
 eu-north-1 eu-west-1 eu-west-2 eu-west-3 sa-east-1 us-east-1 us-east-2 us-west-1 us-west-2 "

usage() {
  cat <<EOF
usage: bash docker/horovod/build_and_push.sh [--dry-run] --account ID --region REGION [--repo NAME] [--tag TAG]
                                              [--base-image URI]

  --account ID        your 12-digit AWS account ID (env ACCOUNT or AWS_ACCOUNT_ID); find it with
                      aws sts get-caller-identity --query Account --output text
  --region REGION     the region of the ECR repository and of the training jobs
                      (env REGION, AWS_REGION or AWS_DEFAULT_REGION)
  --repo NAME         the ECR repository, created if missing (env REPO; default: tensorflow-horovod)
  --tag TAG           the image tag (env TAG; default: 2.21-gpu-py312-horovod<version from the Dockerfile>)
  --base-image URI    the image to extend (env BASE_IMAGE; default: AWS's TensorFlow 2.21 GPU training
                      image in REGION, $dlc_account.dkr.ecr.REGION.amazonaws.com/tensorflow-training:2.21-gpu-py312,
                      known for the 16 default regions only; elsewhere pass what this prints:
                      python -c 'from sagemaker.core import image_uris; print(image_uris.retrieve(framework="tensorflow",
                        region="REGION", version="2.21", py_version="py312", instance_type="ml.g5.xlarge",
                        image_scope="training"))')
  --dry-run           print the commands instead of running them
  -h, --help          show this help
EOF
}

die() {
  printf '[build_and_push] ERROR: %s\n' "$1" >&2
  if [ "${2:-}" = usage ]; then
    usage >&2
  fi
  exit 2
}

dry_run=0
account="${ACCOUNT:-${AWS_ACCOUNT_ID:-}}"
region="${REGION:-${AWS_REGION:-${AWS_DEFAULT_REGION:-}}}"
repo="${REPO:-tensorflow-horovod}"
tag="${TAG:-}"
base_image="${BASE_IMAGE:-}"

while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --account|--region|--repo|--tag|--base-image)
      [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value" usage
      case "$1" in
        --account) account="$2" ;;
        --region) region="$2" ;;
        --repo) repo="$2" ;;
        --tag) tag="$2" ;;
        --base-image) base_image="$2" ;;
      esac
      shift 2 ;;
    *) die "unknown argument: $1" usage ;;
  esac
done

[ -n "$account" ] || die "no AWS account given (--account or ACCOUNT)" usage
[ -n "$region" ] || die "no region given (--region or REGION)" usage
[[ "$account" =~ ^[0-9]{12}$ ]] || die "the account must be 12 digits, not '$account'"
[[ "$region" =~ ^[a-z]{2}(-[a-z]+)+-[0-9]+$ ]] || die "'$region' does not look like an AWS region (e.g. us-east-1)"
[[ "$repo" =~ ^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$ ]] \
  || die "'$repo' is not a valid ECR repository name (lower case letters, digits, . _ - and /)"
[ -f "$dockerfile" ] || die "$dockerfile is missing"
if [ -z "$tag" ]; then
  hvd_version="$(sed -n 's/^ARG HOROVOD_VERSION=\([0-9.]*\)$/\1/p' "$dockerfile")"
  [ -n "$hvd_version" ] || die "no 'ARG HOROVOD_VERSION=' line in $dockerfile"
  tag="2.21-gpu-py312-horovod$hvd_version"
fi
[[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "'$tag' is not a valid image tag"

if [ -z "$base_image" ]; then
  case "$dlc_regions" in
    *" $region "*) base_image="$dlc_account.dkr.ecr.$region.amazonaws.com/tensorflow-training:2.21-gpu-py312" ;;
    *) die "AWS's images for $region are not in account $dlc_account: pass the base image with --base-image" usage ;;
  esac
fi
base_registry="${base_image%%/*}"
registry="$account.dkr.ecr.$region.amazonaws.com"
image="$registry/$repo:$tag"
local_image="$repo:$tag"

if [ "$dry_run" = 0 ]; then
  for tool in docker aws; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not on PATH (use --dry-run to only see the commands)"
  done
fi

# Prints a command (as it could be pasted into a shell) and runs it unless this is a dry run.
run() {
  printf '+'
  printf ' %q' "$@"
  printf '\n'
  if [ "$dry_run" = 0 ]; then
    "$@"
  fi
}

# docker login to an ECR registry with a token from the AWS CLI (the password goes through a pipe).
ecr_login() {
  local login_region="$1" login_registry="$2"
  printf '+ aws ecr get-login-password --region %q | docker login --username AWS --password-stdin %q\n' \
    "$login_region" "$login_registry"
  if [ "$dry_run" = 0 ]; then
    aws ecr get-login-password --region "$login_region" \
      | docker login --username AWS --password-stdin "$login_registry"
  fi
}

ensure_repository() {
  printf '+ aws ecr describe-repositories --region %q --repository-names %q >/dev/null 2>&1 || aws ecr create-repository --region %q --repository-name %q\n' \
    "$region" "$repo" "$region" "$repo"
  if [ "$dry_run" = 0 ]; then
    aws ecr describe-repositories --region "$region" --repository-names "$repo" >/dev/null 2>&1 \
      || aws ecr create-repository --region "$region" --repository-name "$repo" >/dev/null
  fi
}

echo "# 1. log in to AWS's Deep Learning Containers registry to pull the base image"
# The base image's registry is in its own region (the part after .ecr.), which is REGION by default.
base_region="$(printf '%s\n' "$base_registry" | sed -n 's/^[0-9]*\.dkr\.ecr\.\([a-z0-9-]*\)\.amazonaws\.com.*/\1/p')"
if [ -n "$base_region" ]; then
  ecr_login "$base_region" "$base_registry"
else
  echo "# (the base image is not in an ECR registry: no login)"
fi
echo "# 2. build (x86_64 only, like the base image; this compiles Horovod's CUDA code and takes a while)"
run docker build --platform linux/amd64 \
  --build-arg "REGION=$region" --build-arg "BASE_IMAGE=$base_image" \
  -t "$local_image" -f "$dockerfile" "$here"
echo "# 3. create the ECR repository if it does not exist"
ensure_repository
echo "# 4. log in to your registry, tag and push"
ecr_login "$region" "$registry"
run docker tag "$local_image" "$image"
run docker push "$image"

if [ "$dry_run" = 1 ]; then
  echo "# dry run: nothing was run"
fi
echo "training_image=$image"
