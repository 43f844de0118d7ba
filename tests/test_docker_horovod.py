"""docker/horovod: the SageMaker image with Horovod built for GPUs.

Nothing here builds the image (that needs Docker, a network and a large machine). The tests check what
can go wrong without a build: the Dockerfile drifting from the course's own Horovod recipe
(requirements.txt and tools/build_horovod.sh), from the image the SageMaker SDK names for TF 2.21 GPU,
and build_and_push.sh printing or running the wrong commands.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "docker" / "horovod" / "Dockerfile"
SCRIPT = REPO / "docker" / "horovod" / "build_and_push.sh"
BUILD_HOROVOD = REPO / "tools" / "build_horovod.sh"
ACCOUNT = "123456789012"
BASH = shutil.which("bash") or "/bin/bash"

sys.path.insert(0, str(REPO / "tools"))
import image_check  # noqa: E402  (tools/image_check.py: make image-check, which reads its recipe from the Dockerfile)


def _one(pattern: str, text: str, what: str, flags: int = 0) -> str:
    found = re.findall(pattern, text, flags)
    assert len(found) == 1, f"expected exactly one {what}, found {len(found)}"
    return found[0]


def _dockerfile() -> str:
    return DOCKERFILE.read_text()


def _arg_default(name: str) -> str:
    return image_check.arg_default(_dockerfile(), name)


def _course_recipe() -> dict:
    """The course's Horovod recipe, read from requirements.txt and tools/build_horovod.sh."""
    script = BUILD_HOROVOD.read_text()
    flags_block = _one(r"^build_flags=\((.*?)\)$", script, "build_flags=(...)", re.M | re.S)
    return {
        "version": _one(
            r"^#build: horovod==([0-9.]+)", (REPO / "requirements.txt").read_text(), "#build: horovod line", re.M
        ),
        "sha256": _one(r'^sdist_sha256="([0-9a-f]{64})"$', script, "sdist_sha256", re.M),
        "patch": _one(r"^patch_py='(.*?)'$", script, "patch_py='...'", re.M | re.S),
        # "$mpi_flag": with or without MPI, by whether Open MPI is on the machine (the image always has it)
        "flags": dict(flag.split("=", 1) for flag in flags_block.split() if flag != '"$mpi_flag"'),
    }


def _dockerfile_patch(name: str = "horovod-patch-xla-guard.py") -> str:
    return {program: text for program, text, _ in image_check.patches(_dockerfile())}[name]


def _instructions() -> list[str]:
    """The Dockerfile's instructions, each with its continuation lines (a heredoc's body included)."""
    return image_check.instructions(_dockerfile())


def _build_env() -> dict:
    """NAME=VALUE settings on the Dockerfile's `pip wheel` command (the Horovod build)."""
    return image_check.build_env(_dockerfile())


def test_base_image_is_the_sdk_image_for_tf_2_21_gpu():
    image_uris = pytest.importorskip("sagemaker.core.image_uris")
    template = _arg_default("BASE_IMAGE")
    default_region = _arg_default("REGION")
    assert "${REGION}" in template, "the base image should follow the REGION build argument"
    expected = image_uris.retrieve(
        framework="tensorflow",
        region=default_region,
        version="2.21",
        py_version="py312",
        instance_type="ml.g5.xlarge",
        image_scope="training",
    )
    assert template.replace("${REGION}", default_region) == expected  # every other region: the test below
    lines = [line for line in _dockerfile().splitlines() if line.startswith("FROM ")]
    assert lines == ["FROM ${BASE_IMAGE}"], "one stage, built on the BASE_IMAGE argument"


def test_horovod_version_and_checksum_match_the_course_build():
    recipe = _course_recipe()
    assert _arg_default("HOROVOD_VERSION") == recipe["version"]
    assert _arg_default("HOROVOD_SDIST_SHA256") == recipe["sha256"]
    text = _dockerfile()
    # the checksum is checked on the downloaded source release, and that release is what gets built
    assert "--no-binary :all:" in text and '"horovod==${HOROVOD_VERSION}"' in text
    assert "sha256sum -c -" in text and "${HOROVOD_SDIST_SHA256}" in text


def test_xla_guard_patch_is_the_course_patch(tmp_path):
    course_patch = _course_recipe()["patch"]
    image_patch = _dockerfile_patch()
    assert image_patch == course_patch, "the Dockerfile's patch program differs from tools/build_horovod.sh's"
    guard = _one(r'^guard = "(.*)"$', course_patch, "guard line", re.M)
    program = tmp_path / "patch.py"
    program.write_text(image_patch)
    source = tmp_path / "xla_mpi_ops.cc"
    source.write_text(f"// before\n{guard}\nint x;\n#endif\n")
    subprocess.run([sys.executable, str(program), str(source)], check=True)
    patched = source.read_text()
    assert guard not in patched and patched.splitlines()[1].startswith("#if 0  //")
    # a source without the guard line is refused, not silently built unpatched
    source.write_text("int x;\n")
    refused = subprocess.run([sys.executable, str(program), str(source)], capture_output=True, text=True)
    assert refused.returncode != 0 and "expected one" in refused.stderr
    # and the image applies it to the unpacked release before building the wheel
    build = next(i for i in _instructions() if "pip wheel" in i)
    applied = build.find(' /tmp/horovod-patch-xla-guard.py "$src/horovod/tensorflow/xla_mpi_ops.cc"')
    assert 0 <= applied < build.find("pip wheel")


def test_gpu_stream_patch(tmp_path):
    """TF 2.21 has no stream_executor::gpu::AsGpuStreamValue (a GPU build of Horovod 0.28.1 fails to load with an
    undefined symbol, found by make image-check); the patch takes the stream from platform_specific_handle()."""
    program = tmp_path / "gpu.py"
    program.write_text(_dockerfile_patch("horovod-patch-gpu-stream.py"))
    source = tmp_path / "mpi_ops.cc"
    call = "stream_executor::gpu::AsGpuStreamValue("
    source.write_text(
        f"#if HAVE_GPU\nGpuStreamHandle AsGpuStreamValue(Stream* stream);\n#endif\n// Undef LOG macro from TensorFlow\n"
        f"void a() {{ auto s = {call}ctx->stream()); }}\nvoid b() {{ auto s = {call}\n    ctx->stream()); }}\n"
    )
    subprocess.run([sys.executable, str(program), str(source)], check=True)
    patched = source.read_text()
    assert call not in patched and patched.count("HorovodGpuStream(ctx->stream())") == 1
    assert patched.count("HorovodGpuStream(\n    ctx->stream())") == 1
    helper = patched.index("static inline GpuStreamHandle HorovodGpuStream(stream_executor::Stream* stream)")
    assert patched.index("#if HAVE_GPU\n//") < helper < patched.index("// Undef LOG macro") < patched.index("void a()")
    assert "stream->platform_specific_handle().stream" in patched
    # a source that is not the expected release is refused
    source.write_text("int x;\n")
    refused = subprocess.run([sys.executable, str(program), str(source)], capture_output=True, text=True)
    assert refused.returncode != 0 and "expected one" in refused.stderr
    # no line of a patch program starts with "#": Docker's parser could take it for a comment of the Dockerfile
    for name, text, _ in image_check.patches(_dockerfile()):
        assert not [line for line in text.splitlines() if line.lstrip().startswith("#")], name


def test_image_replay_reads_its_recipe_from_the_dockerfile():
    """make image-check builds what the Dockerfile builds: its lists, patches and flags, read from it."""
    rec = image_check.recipe(_dockerfile())
    assert rec["version"] == _course_recipe()["version"] and rec["sha256"] == _course_recipe()["sha256"]
    assert rec["frameworks"] == ["TensorFlow", "MPI", "Gloo", "NCCL"]
    assert {"nvcc", "mpicxx", "mpirun", "cmake"} <= set(rec["tools"]) and "mpi4py" in rec["imports"]
    assert [(name, target) for name, _, target in rec["patches"]] == [
        ("horovod-patch-xla-guard.py", "horovod/tensorflow/xla_mpi_ops.cc"),
        ("horovod-patch-gpu-stream.py", "horovod/tensorflow/mpi_ops.cc"),
    ]
    flags = image_check.replay_env(rec["env"], nccl_home="/n", cuda_home="/c", cc_list="90", jobs=2)
    assert flags["HOROVOD_NCCL_INCLUDE"] == "/n/include" and flags["HOROVOD_CUDA_HOME"] == "/c"
    assert flags["HOROVOD_BUILD_CUDA_CC_LIST"] == "90" and flags["MAKEFLAGS"] == "-j2"
    # a flag whose shell value the replay does not know stops it, rather than passing "$x" on to the build
    with pytest.raises(image_check.ReplayError, match="HOROVOD_NEW=\\$new_thing"):
        image_check.replay_env({"HOROVOD_NEW": "$new_thing"}, nccl_home="/n", cuda_home="/c", cc_list="90", jobs=2)
    # a patch program written but never applied (or applied twice) is refused
    text = _dockerfile()
    unapplied = text.replace(
        '    "$py" /tmp/horovod-patch-gpu-stream.py "$src/horovod/tensorflow/mpi_ops.cc"; \\\n', ""
    )
    assert unapplied != text
    with pytest.raises(image_check.ReplayError, match="each should be applied once"):
        image_check.patches(unapplied)


def test_image_lock_has_the_base_image_versions():
    """docker/horovod/image-lock.txt stands in for the image's /opt/venv: the versions the Dockerfile's header reads
    from the base image's lockfile are the ones it pins."""
    pins = dict(
        line.split("#")[0].strip().split("==")
        for line in image_check.LOCK.read_text().splitlines()
        if "==" in line.split("#")[0]
    )
    header = re.search(r"Its lockfile pins (.*?), so nothing", _dockerfile(), re.S).group(1)
    named = dict(re.findall(r"([a-z][\w-]*) (\d[\w.]*)", re.sub(r"\s*#\s*", " ", header)))
    assert named, header
    for name, version in named.items():
        assert pins.get(name) == version, (
            f"{name} {version} in the Dockerfile's header, {pins.get(name)} in image-lock.txt"
        )


def test_gpu_build_flags():
    env = _build_env()
    gpu = {
        "HOROVOD_GPU_OPERATIONS": "NCCL",
        "HOROVOD_WITH_MPI": "1",
        "HOROVOD_WITH_TENSORFLOW": "1",
        "HOROVOD_WITHOUT_PYTORCH": "1",
        "HOROVOD_WITHOUT_MXNET": "1",
        "HOROVOD_WITH_GLOO": "1",
        "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
    }
    for name, value in gpu.items():
        assert env.get(name) == value, f"{name}={value} is missing from the Horovod build"
    assert "HOROVOD_WITHOUT_MPI" not in env
    # every course flag is kept (the course's MPI choice depends on the machine; the image has Open MPI)
    for name, value in _course_recipe()["flags"].items():
        if name != "HOROVOD_WITHOUT_MPI":
            assert env.get(name) == value, f"course flag {name}={value} is not in the image's build"
    assert "--no-build-isolation" in _dockerfile()
    assert "ENV SETUPTOOLS_USE_DISTUTILS=local" in _dockerfile()


def test_dockerfile_ends_with_check_build():
    last = _instructions()[-1]
    assert last.startswith("RUN ") and "horovodrun --check-build" in last
    for what in ("TensorFlow", "MPI", "Gloo", "NCCL"):
        assert what in last


def test_script_knows_the_regions_where_the_dlc_account_serves_the_image():
    image_uris = pytest.importorskip("sagemaker.core.image_uris")
    listed = _one(r'^dlc_regions="(.*?)"$', SCRIPT.read_text(), "dlc_regions", re.M | re.S).split()
    account = _one(r"^dlc_account=(\d+)$", SCRIPT.read_text(), "dlc_account", re.M)
    template = _arg_default("BASE_IMAGE")
    for region in listed:  # the Dockerfile's default, with REGION set, is the SDK's image in each of them
        expected = image_uris.retrieve(
            framework="tensorflow",
            region=region,
            version="2.21",
            py_version="py312",
            instance_type="ml.g5.xlarge",
            image_scope="training",
        )
        assert expected.startswith(f"{account}.dkr.ecr.{region}.amazonaws.com/")
        assert template.replace("${REGION}", region) == expected
    elsewhere = image_uris.retrieve(
        framework="tensorflow",
        region="af-south-1",
        version="2.21",
        py_version="py312",
        instance_type="ml.g5.xlarge",
        image_scope="training",
    )
    assert "af-south-1" not in listed and not elsewhere.startswith(account)
    refused = _run_script("--dry-run", "--account", ACCOUNT, "--region", "af-south-1")
    assert refused.returncode != 0 and "--base-image" in refused.stderr
    given = _run_script("--dry-run", "--account", ACCOUNT, "--region", "af-south-1", "--base-image", elsewhere)
    assert given.returncode == 0, given.stderr
    registry = elsewhere.split("/")[0]
    assert f"--password-stdin {registry}\n" in given.stdout and f"BASE_IMAGE={elsewhere} " in given.stdout


def _run_script(*args: str, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in _SCRIPT_ENV}
    clean.update(env or {})
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, env=clean, timeout=60)


_SCRIPT_ENV = ("ACCOUNT", "AWS_ACCOUNT_ID", "REGION", "AWS_REGION", "AWS_DEFAULT_REGION", "REPO", "TAG", "BASE_IMAGE")


def test_dry_run_prints_the_commands(tmp_path):
    # no docker and no aws on PATH: a dry run must not need them
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("sed", "dirname"):
        (bare / tool).symlink_to(shutil.which(tool))
    result = _run_script(
        "--dry-run",
        "--account",
        ACCOUNT,
        "--region",
        "eu-west-1",
        "--repo",
        "course/tf-hvd",
        "--tag",
        "v1",
        env={"PATH": str(bare)},
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    image = f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/course/tf-hvd:v1"
    base = "763104351884.dkr.ecr.eu-west-1.amazonaws.com/tensorflow-training:2.21-gpu-py312"
    commands = [line[2:] for line in out.splitlines() if line.startswith("+ ")]
    assert commands[0] == (
        "aws ecr get-login-password --region eu-west-1 | docker login --username AWS --password-stdin "
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com"
    )
    assert commands[1] == (
        f"docker build --platform linux/amd64 --build-arg REGION=eu-west-1 --build-arg BASE_IMAGE={base} "
        "-t course/tf-hvd:v1 -f docker/horovod/Dockerfile docker/horovod"
    )
    assert "aws ecr create-repository --region eu-west-1 --repository-name course/tf-hvd" in commands[2]
    assert commands[3].endswith(f"--password-stdin {ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com")
    assert commands[4:] == [f"docker tag course/tf-hvd:v1 {image}", f"docker push {image}"]
    assert out.splitlines()[-1] == f"training_image={image}"


def test_defaults_come_from_env_and_dockerfile():
    result = _run_script("--dry-run", env={"ACCOUNT": ACCOUNT, "AWS_REGION": "us-west-2"})
    assert result.returncode == 0, result.stderr
    tag = f"2.21-gpu-py312-horovod{_course_recipe()['version']}"
    assert result.stdout.splitlines()[-1] == (
        f"training_image={ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com/tensorflow-horovod:{tag}"
    )


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--dry-run",),
        ("--dry-run", "--region", "us-east-1"),
        ("--dry-run", "--account", ACCOUNT),
        ("--dry-run", "--account", "12345", "--region", "us-east-1"),
        ("--dry-run", "--account", ACCOUNT, "--region", "us-east-1", "--repo", "Bad Name"),
        ("--dry-run", "--account", ACCOUNT, "--region", "us-east-1", "--bogus"),
        ("--dry-run", "--account"),
    ],
)
def test_bad_or_missing_arguments_fail_with_a_message(args):
    result = _run_script(*args)
    assert result.returncode != 0
    assert "ERROR" in result.stderr
    assert "training_image=" not in result.stdout and "+ docker" not in result.stdout
    if not args:
        assert "usage:" in result.stderr


def test_real_run_calls_docker_and_aws_in_order(tmp_path):
    """With stand-ins for docker and aws that log their arguments; the repository does not exist yet."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    stub = (
        '#!/usr/bin/env bash\nprintf "%s %s\\n" "$(basename "$0")" "$*" >>"$CALLS"\n'
        'case "$*" in "ecr describe-repositories"*) exit 254 ;; "ecr get-login-password"*) echo token ;; "login "*) read -r got; echo "stdin $got" >>"$CALLS" ;; esac\n'
    )
    for tool in ("docker", "aws"):
        (bin_dir / tool).write_text(stub)
        (bin_dir / tool).chmod(0o755)
    result = _run_script(
        "--account",
        ACCOUNT,
        "--region",
        "us-east-1",
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CALLS": str(log)},
    )
    assert result.returncode == 0, result.stderr
    text = log.read_text()
    # `aws ecr get-login-password | docker login` runs both at once, so the aws half is checked apart
    lines = text.splitlines()
    assert lines.count("aws ecr get-login-password --region us-east-1") == 2, text
    verbs = [" ".join(line.split()[:2]) for line in lines if not line.startswith("aws ecr get-login-password")]
    assert verbs == [
        "docker login",  # AWS's DLC registry, to pull the base image
        "stdin token",  # the password came through the pipe
        "docker build",
        "aws ecr",  # describe-repositories: fails, so
        "aws ecr",  # create-repository
        "docker login",  # the user's registry
        "stdin token",
        "docker tag",
        "docker push",
    ], text
    assert "ecr create-repository --region us-east-1 --repository-name tensorflow-horovod" in text
    assert f"docker push {ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/tensorflow-horovod:" in text


def test_shellcheck():
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    if not Path(shellcheck).exists():
        pytest.skip("shellcheck is not installed")
    result = subprocess.run([shellcheck, "-x", str(SCRIPT)], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_check_refuses_a_bad_compute_capability(capsys):
    """Bad input to make image-check stops it at once, with what to give instead (nothing is built or installed)."""
    assert image_check.main(["--cc", "sm90"]) == 1
    assert "give one compute capability as digits, e.g. 90" in capsys.readouterr().err
