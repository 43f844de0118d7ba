"""docker/eks: the images lesson 09's TFJob and MPIJob name, replayed without Docker.

The Dockerfile copies the course's code onto a base image (AWS's TensorFlow 2.21 image for the TFJob, the course's
Horovod image for the MPIJob). Nothing here builds it. As `make image-check` replays docker/horovod/Dockerfile's
build from the Dockerfile itself, these tests replay this one's: they read its instructions, make the build context
the way Docker does (the repository root, less what .dockerignore leaves out, with Docker's own matching rules), run
its COPY lines into a folder that stands for the image's file system, and then check that folder against what the
jobs run: the files the manifests name under /opt/course, the modules the scripts import, the dataset they read,
and a training run of train_mwms.py from that folder alone. The base images are checked against utils/kubeflow.py,
docker/horovod/ and the SageMaker SDK.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from utils import data, kubeflow

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / kubeflow.DOCKERFILE
DOCKERIGNORE = REPO / ".dockerignore"  # the build context is the repository root
LESSON = REPO / "notebooks" / "09_kubernetes.ipynb"
CODE = kubeflow.CODE_IN_IMAGE
SCRIPTS = {"train_mwms.py": kubeflow.TF_IMAGE, "train_horovod.py": kubeflow.HVD_IMAGE}  # each job's program, image


# ---- the Dockerfile, read --------------------------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comment lines dropped, continuation lines joined."""
    out, pending = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or (not line.strip() and not pending):
            continue
        if "<<" in line:
            raise AssertionError(f"this replay does not read heredocs: {line!r}")
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def arg_defaults(text: str) -> dict[str, str]:
    """The ARG lines' defaults, with ${NAME} of earlier ARGs filled in (as Docker expands them before FROM)."""
    args: dict[str, str] = {}
    for word, rest in instructions(text):
        if word == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            args[name] = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], value)
    return args


def copies(text: str) -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY; a flag this replay does not know stops it."""
    found = []
    for word, rest in instructions(text):
        if word == "ADD":
            raise AssertionError("ADD fetches and unpacks: use COPY, which this replay reads")
        if word != "COPY":
            continue
        parts = rest.split()
        flags = [p for p in parts if p.startswith("--")]
        assert all(f.startswith(("--chown=", "--chmod=")) for f in flags), f"COPY {rest}: a flag this replay skips"
        paths = [p for p in parts if not p.startswith("--")]
        assert len(paths) >= 2, f"COPY {rest}: no destination"
        assert not any(c in p for p in paths for c in "*?["), f"COPY {rest}: name the files, no wildcards"
        found.append((paths[:-1], paths[-1]))
    return found


# ---- the build context: Docker's .dockerignore rules --------------------------------------------------------------
# Ported from moby/patternmatcher (patternmatcher.go: New, Pattern.compile and match, MatchesOrParentMatches; and
# ignorefile/ignorefile.go ReadAll), which both BuildKit and the classic builder use to make the build context.


def ignore_patterns(text: str) -> list[tuple[bool, str]]:
    """(exception, pattern) of a .dockerignore, as ignorefile.ReadAll reads it: comments and blank lines dropped,
    `!` marks an exception, each pattern cleaned (filepath.Clean) and a leading / dropped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = os.path.normpath(line[1:].strip() if exception else line).lstrip("/")
        out.append((exception, pattern))
    return out


def _compile(pattern: str):
    """Pattern.compile: an exact name, a prefix (`dir/**`), a suffix (`**/name`) or a regular expression."""
    regex, kind, i, step = "^", "exact", 0, 0
    while i < len(pattern):
        ch, i = pattern[i], i + 1
        if ch == "*" and pattern[i : i + 1] == "*":  # some flavour of **
            i += 1 + (pattern[i + 1 : i + 2] == "/")
            if i >= len(pattern):
                kind, regex = ("prefix", regex) if kind == "exact" else ("regexp", regex + ".*")
            else:
                kind, regex = "regexp", regex + "(.*/)?"
            kind = "suffix" if step == 0 else kind
        elif ch in "*?":
            kind, regex = "regexp", regex + ("[^/]*" if ch == "*" else "[^/]")
        elif ch in ".+()|{}$":
            regex += "\\" + ch
        elif ch == "\\" and i < len(pattern):
            kind, regex, i = "regexp", regex + "\\" + pattern[i], i + 1
        elif ch in "[]":
            kind, regex = "regexp", regex + ch
        else:
            regex += ch
        step += 1
    if kind == "exact":
        return lambda path: path == pattern
    if kind == "prefix":
        return lambda path: path.startswith(pattern[:-2])
    if kind == "suffix":
        suffix = pattern[2:]
        return lambda path: path.endswith(suffix) or (suffix[:1] == "/" and path == suffix[1:])
    compiled = re.compile(regex + "$")
    return lambda path: compiled.match(path) is not None


def excluded(path: str, patterns: list[tuple[bool, str]]) -> bool:
    """MatchesOrParentMatches: every pattern that matches the path or one of its parent folders sets the verdict,
    the last one wins, and an exception (`!`) lets the path back in."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]  # its parent folders, then the path
    verdict = False
    for exception, pattern in patterns:
        if exception != verdict:  # as patternmatcher skips them: nothing to let back in, or already excluded
            continue
        match = _compile(pattern)
        if any(match(c) for c in candidates):
            verdict = not exception
    return verdict


def _may_let_back(folder: str, patterns: list[tuple[bool, str]]) -> bool:
    """Whether an exception could let back in something under an excluded folder (if not, its walk is pruned)."""
    names = folder.split("/")
    return any(
        exception and ("**" in pattern or all(fnmatch.fnmatchcase(n, d) for n, d in zip(names, pattern.split("/"))))
        for exception, pattern in patterns
    )


def context_files(root: Path, patterns: list[tuple[bool, str]]) -> set[str]:
    """The files Docker sends as the build context of `root` (paths relative to it, with /)."""
    sent = set()
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root).as_posix()
        prefix = "" if rel == "." else rel + "/"
        dirs[:] = [d for d in dirs if not excluded(prefix + d, patterns) or _may_let_back(prefix + d, patterns)]
        sent |= {prefix + f for f in files if not excluded(prefix + f, patterns)}
    return sent


# ---- the replay ----------------------------------------------------------------------------------------------------


def replay(dockerfile: str, dockerignore: str, image: Path, root: Path = REPO) -> tuple[set[str], list[str]]:
    """Run the Dockerfile's COPY lines from the build context of `root` into `image` (the image's /). Returns the
    context's files that some COPY sends, and the problems: a COPY source that is not in the repository, or that
    .dockerignore leaves out of the context (Docker: "not found"), and context files that no COPY uses."""
    context, problems, used = context_files(root, ignore_patterns(dockerignore)), [], set()
    for sources, dest in copies(dockerfile):
        if len(sources) > 1 and not dest.endswith("/"):
            problems.append(f"COPY {' '.join(sources)} {dest}: several sources need a destination ending with /")
        for src in sources:
            name = src.strip("/")
            if not (root / name).exists():
                problems.append(f"COPY {src}: not in the repository")
                continue
            if (root / name).is_file():
                files = {name: (image / dest.lstrip("/") / Path(name).name) if dest.endswith("/") else image / dest}
            else:  # a folder: its contents, into the destination
                files = {f: image / dest.lstrip("/") / f[len(name) + 1 :] for f in context if f.startswith(name + "/")}
            if (root / name).is_file() and name not in context or not files:
                problems.append(f"COPY {src}: .dockerignore leaves it out of the build context")
                continue
            for f, target in files.items():
                if f in context:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(root / f, target)
                    used.add(f)
    if context - used:
        problems.append(
            f"the build context sends {len(context - used)} files no COPY uses, e.g. {sorted(context - used)[:3]}"
        )
    return used, problems


def _in_image(image: Path, path: str) -> Path:
    return image / path.lstrip("/")


def lesson_code() -> str:
    """Lesson 09's code cells, as one text."""
    cells = json.loads(LESSON.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def job_manifests() -> list[dict]:
    """The two jobs as utils/kubeflow.py builds them, running the programs lesson 09 runs."""
    mwms, hvd = (f"{CODE}/scripts/{name}" for name in SCRIPTS)
    tf = kubeflow.tfjob("f", chief=1, workers=2, image=kubeflow.TF_IMAGE.name, command=["python", mwms])
    line = ["mpirun", "-np", "2", "python", hvd]
    mpi = kubeflow.mpijob("h", workers=2, slots_per_worker=1, image=kubeflow.HVD_IMAGE.name, command=line)
    return [kubeflow.manifest(tf), mpi]


def paths_under_code(*texts: str) -> set[str]:
    """Every path under /opt/course that the texts name (manifests: args, workingDir, PYTHONPATH; the lesson)."""
    return {p for t in texts for p in re.findall(rf"{re.escape(CODE)}(?:/[\w-]+(?:\.[\w-]+)*)*", t)}


def imports_of(image: Path, script: Path) -> tuple[set[str], set[str], list[str]]:
    """What a script imports when it starts (module level, transitively through the course's `utils`, read from the
    image's copy): the utils modules, the other packages (not the standard library's), the modules the image lacks."""
    seen, packages, missing, todo = set(), set(), [], [script]
    while todo:
        names = []
        for node in ast.parse(todo.pop().read_text()).body:  # module level only, what runs when it starts
            for n in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
                if isinstance(n, ast.Import):
                    names += [a.name for a in n.names]
                elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                    names += [f"utils.{a.name}" for a in n.names] if n.module == "utils" else [n.module]
        for name in names:
            top = name.split(".")[0]
            if top == "utils":
                for module in ("utils", name):  # a submodule's import runs utils/__init__.py first
                    if module in seen:
                        continue
                    seen.add(module)
                    path = f"{CODE}/{module.replace('.', '/')}"
                    found = [_in_image(image, path + s) for s in (".py", "/__init__.py")]
                    if any(f.is_file() for f in found):
                        todo.append(next(f for f in found if f.is_file()))
                    else:
                        missing.append(module)
            elif top not in sys.stdlib_module_names and top != "__future__":
                packages.add(top)
    return seen, packages, missing


def check(image: Path, dockerfile: str, dockerignore: str) -> list[str]:
    """Every problem the replayed image has for lesson 09's jobs."""
    _, problems = replay(dockerfile, dockerignore, image)
    for path in sorted(paths_under_code(json.dumps(job_manifests()), lesson_code())):
        if not _in_image(image, path).exists():
            problems.append(f"{path}: a job runs it or names it, and the image does not have it")
    provided = set(_one(r"^# Imports the bases provide: (.*)$", dockerfile).split())
    for name, job_image in SCRIPTS.items():
        script = _in_image(image, f"{CODE}/scripts/{name}")
        if not script.is_file():
            continue
        _, packages, missing = imports_of(image, script)
        problems += [f"{name} imports {m}, which the image does not have" for m in missing]
        # horovod is in the course's Horovod image only, not in AWS's TensorFlow 2.21 image
        base_has = provided - ({"horovod"} if job_image.base != kubeflow.HOROVOD_IMAGE else set())
        problems += [f"{name} imports {m}, which its base image does not provide" for m in sorted(packages - base_has)]
    dataset = f"{CODE}/{data.DATASET.relative_to(REPO).as_posix()}"  # where utils.data looks for it in the image
    if not _in_image(image, dataset).is_file():
        problems.append(f"{dataset}: the scripts read it when given no --data-size, and the image does not have it")
    return problems


def _one(pattern: str, text: str) -> str:
    found = re.findall(pattern, text, re.M)
    assert len(found) == 1, f"expected one match of {pattern!r}, found {len(found)}"
    return found[0]


def _texts() -> tuple[str, str]:
    return DOCKERFILE.read_text(), DOCKERIGNORE.read_text()


# ---- the tests -----------------------------------------------------------------------------------------------------


def test_the_image_holds_what_the_jobs_run(tmp_path):
    assert check(tmp_path, *_texts()) == []
    copied = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    for needed in ("scripts/train_mwms.py", "scripts/train_horovod.py", "utils/__init__.py", "utils/data.py"):
        assert f"{CODE[1:]}/{needed}" in copied
    assert not [p for p in copied if "__pycache__" in p or p.endswith(".pyc")]
    # what the jobs name under /opt/course: the programs, and the folder as workingDir and PYTHONPATH
    named = paths_under_code(json.dumps(job_manifests()))
    assert {CODE, *(f"{CODE}/scripts/{name}" for name in SCRIPTS)} == named
    # the scripts' imports, as read from the image's copy
    _, mwms_packages, _ = imports_of(tmp_path, _in_image(tmp_path, f"{CODE}/scripts/train_mwms.py"))
    hvd_modules, hvd_packages, _ = imports_of(tmp_path, _in_image(tmp_path, f"{CODE}/scripts/train_horovod.py"))
    assert "horovod" in hvd_packages and "horovod" not in mwms_packages and "utils.hvd_keras" in hvd_modules


def test_the_build_context_is_what_the_image_copies():
    """The context is the repository root: .dockerignore must keep .venv/, .git/, build/ and the rest out of it."""
    patterns = ignore_patterns(DOCKERIGNORE.read_text())
    sent = context_files(REPO, patterns)
    sources = [s.strip("/") for s, _ in _sources()]
    assert sent and all(any(f == s or f.startswith(s + "/") for s in sources) for f in sent)
    for heavy in (".venv/pyvenv.cfg", ".git/HEAD", "build/x", "runs/x", "notebooks/09_kubernetes.ipynb", "tests/x"):
        assert excluded(heavy, patterns), heavy
    for kept in ("utils/kubeflow.py", "scripts/train_mwms.py", "data/seattle_hourly_temperature_2010.csv"):
        assert not excluded(kept, patterns), kept
    assert excluded("utils/__pycache__/data.cpython-312.pyc", patterns) and excluded("scripts/train_ps.py", patterns)


def _sources() -> list[tuple[str, str]]:
    return [(s, d) for sources, d in copies(DOCKERFILE.read_text()) for s in sources]


@pytest.mark.parametrize(
    "change, problem",
    [
        (("dockerfile", "COPY data/seattle_hourly_temperature_2010.csv /opt/course/data/\n", ""), "--data-size"),
        (("dockerfile", "scripts/train_horovod.py /opt", "scripts/train_horovd.py /opt"), "not in the repository"),
        (("dockerfile", "/opt/course/scripts/", "/opt/code/scripts/"), "train_mwms.py: a job runs it"),
        (("dockerignore", "!scripts/train_horovod.py\n", ""), "COPY scripts/train_horovod.py: .dockerignore"),
        (("dockerignore", "**/*.pyc\n", "**/*.pyc\nutils/job.py\n"), "imports utils.job, which the image"),
        (("dockerignore", "!utils/\n", "!utils/\n!notebooks/\n"), "files no COPY uses"),
        (("dockerfile", "horovod\n", "\n"), "train_horovod.py imports horovod, which its base"),
    ],
)
def test_the_replay_catches_mistakes(tmp_path, change, problem):
    """Each mistake a real build would turn into a failed job (or a bloated context) is reported."""
    which, old, new = change
    texts = dict(zip(("dockerfile", "dockerignore"), _texts()))
    assert texts[which].count(old) == 1, old
    texts[which] = texts[which].replace(old, new)
    problems = check(tmp_path, texts["dockerfile"], texts["dockerignore"])
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    "patterns, path, left_out",
    [  # cases of moby/patternmatcher's patternmatcher_test.go (TestMatches, MatchesOrParentMatches)
        (["**"], "dir/file", True),
        (["dir/**"], "dir/dir2/file", True),
        (["**/dir"], "dir/file", True),
        (["**/dir2/*"], "dir/dir2/file", True),
        (["**file"], "dir/dir/file", True),
        (["**/file*.txt"], "dir/dir/file.txt", True),
        (["**/**/*.txt2"], "dir/dir/file.txt", False),
        (["a/*.txt"], "a/dir/file.txt", False),
        (["a[b-d]e"], "ace", True),
        (["a[b-d]e"], "aae", False),
        ([".*"], "foo", False),
        (["abc.def"], "abcZdef", False),
        (["abc/**"], "abc", False),
        (["**/.foo"], "bar.foo", False),
        (["a(b)c/def"], "a(b)c/def", True),
        (["docs", "!docs/README.md"], "docs/README.md", False),
        (["docs/*", "!docs/README.md"], "docs/README.md", False),
        (["!fileutils.go", "*.go"], "fileutils.go", True),
        (["**", "!util/docker/web"], "util/docker/web/foo", False),
        (["**", "!util/docker/web", "util/docker/web/foo"], "util/docker/web/foo", True),
        (["**", "!dist/*.whl"], "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl", False),
    ],
)
def test_dockerignore_rules_are_dockers(patterns, path, left_out):
    assert excluded(path, ignore_patterns("\n".join(patterns))) is left_out


def test_the_dockerfile_keeps_the_base_entrypoint_and_installs_nothing():
    steps = instructions(DOCKERFILE.read_text())
    words = [w for w, _ in steps]
    assert set(words) <= {"ARG", "FROM", "COPY", "ENV", "WORKDIR"}, "no RUN, no ENTRYPOINT or CMD: the base's stay"
    assert [r for w, r in steps if w == "FROM"] == ["${BASE}"], "one stage, on the BASE build argument"
    assert ("ENV", f"PYTHONPATH={CODE}") in steps and ("WORKDIR", CODE) in steps
    assert all(dest.startswith(CODE + "/") for _, dest in _sources())


def test_the_bases_are_the_ones_lesson_09_names():
    defaults = arg_defaults(DOCKERFILE.read_text())
    assert defaults["BASE"] == kubeflow.AWS_TF_IMAGE == kubeflow.TF_IMAGE.base
    # the same AWS image as the course's Horovod image is built on (tests/test_docker_horovod.py ties that to the SDK)
    horovod = arg_defaults(re.sub(r"(?m)^(RUN|COPY) .*$", "", (REPO / "docker/horovod/Dockerfile").read_text()))
    assert horovod["BASE_IMAGE"] == kubeflow.AWS_TF_IMAGE
    # the MPIJob's base is the Horovod image as docker/horovod/build_and_push.sh names it in the lesson's registry
    account, region = kubeflow.REGISTRY.split(".")[0], kubeflow.REGISTRY.split(".")[3]
    dry = subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(REPO / "docker/horovod/build_and_push.sh"), "--dry-run"]
        + ["--account", account, "--region", region],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert _one(r"^training_image=(\S+)$", dry) == kubeflow.HOROVOD_IMAGE == kubeflow.HVD_IMAGE.base
    # lesson 09 names the images through utils/kubeflow.py, and no other registry image
    code = lesson_code()
    assert "kubeflow.TF_IMAGE.name" in code and "kubeflow.HVD_IMAGE.name" in code
    assert not re.findall(r"\d{12}\.dkr\.ecr\.", code), "name the images as kubeflow.TF_IMAGE / HVD_IMAGE"


def test_build_and_push_commands():
    for image in (kubeflow.TF_IMAGE, kubeflow.HVD_IMAGE):
        build, repository, push = image.commands()
        assert f"--build-arg BASE={image.base} -t {image.name} -f {kubeflow.DOCKERFILE} ." in build
        assert build.startswith("docker build --platform linux/amd64 ")  # the base images are x86_64 only
        assert push == f"docker push {image.name}" and "create-repository" in repository
    lines = kubeflow.image_commands(kubeflow.TF_IMAGE, kubeflow.HVD_IMAGE)
    logins = [line.split()[-1] for line in lines if "docker login" in line]
    assert logins == ["763104351884.dkr.ecr.us-east-1.amazonaws.com", kubeflow.REGISTRY]
    with pytest.raises(ValueError, match="not an Amazon ECR registry"):
        kubeflow.JobImage("ghcr.io/me/x:1", kubeflow.AWS_TF_IMAGE).commands()


def test_train_mwms_runs_from_the_image_copy(tmp_path):
    """The TFJob's program, run from the replayed /opt/course alone (this checkout taken off sys.path), on the course
    dataset: a missing module or data file fails here as it would in the pod. (Python and packages: this machine's.)"""
    image = tmp_path / "image"
    assert replay(*_texts(), image)[1] == []
    code = _in_image(image, CODE)
    driver = (
        "import runpy, sys; sys.path[:] = [p for p in sys.path if p not in ('', sys.argv[1])]; "
        "sys.argv = sys.argv[2:]; import utils; assert utils.__file__.startswith(sys.path[0]), utils.__file__; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    args = ["--epochs", "1", "--width", "8", "--depth", "1", "--checkpoint-dir", str(tmp_path / "ckpt")]
    env = {
        k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "MLFLOW_TRACKING_URI") and not k.startswith("SM_")
    }
    env.update(PYTHONPATH=str(code), CUDA_VISIBLE_DEVICES="-1")
    done = subprocess.run(
        [sys.executable, "-c", driver, str(REPO), str(code / "scripts" / "train_mwms.py"), *args],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result, done.stdout
