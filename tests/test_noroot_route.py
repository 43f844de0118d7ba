"""Where the set-up has no root and no apt-get (a SageMaker notebook instance), Open MPI and SimGrid's SMPI live in
the environment's bin folder, which the kernel the set-up registers puts first on its PATH. A kernel or shell
started otherwise does not see them: the lessons then say so in one line, naming the folder and what to do,
instead of calling them missing. (The route itself, end to end, is `make noroot-check`.)"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

from utils import netlab, simgrid


def fake_environment(tmp_path: Path, tools: list[str]) -> Path:
    """A bin folder holding a python and `tools` (empty executables), as the set-up's environment would."""
    folder = tmp_path / "env" / "bin"
    folder.mkdir(parents=True)
    for name in ["python", *tools]:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(stat.S_IRWXU)
    return folder


def test_tools_in_the_environment_but_not_on_path_are_named_with_the_folder(monkeypatch, tmp_path):
    folder = fake_environment(tmp_path, ["mpirun", "smpicc", "smpirun"])
    monkeypatch.setattr(sys, "executable", str(folder / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    why = netlab.not_on_path(["mpirun"])
    assert why.startswith("mpirun is in this environment") and str(folder) in why
    assert f"export PATH={folder}:$PATH" in why and "\n" not in why
    sim = simgrid.available()
    assert sim.startswith("SimGrid's smpicc and smpirun are in this environment") and str(folder) in sim


def test_nothing_is_said_when_the_tools_are_on_path_or_not_in_the_environment(monkeypatch, tmp_path):
    folder = fake_environment(tmp_path, ["mpirun"])
    monkeypatch.setattr(sys, "executable", str(folder / "python"))
    monkeypatch.setenv("PATH", str(folder))
    assert netlab.not_on_path(["mpirun"]) == ""
    assert netlab.not_on_path(["smpirun"]) == ""  # not in the environment: the caller says it is missing
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    assert "not installed" in simgrid.available()


def test_a_cached_only_set_up_compiles_no_simgrid_where_none_is_cached(tmp_path):
    """A check without root asked for cached builds only (NOROOT_CACHED_ONLY=1) must not start SimGrid's long
    compile: with no cached build, build_simgrid.sh says so in one line and stops with status 75, the status the
    set-up and the check pass on."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "COURSE_CACHED_ONLY": "1", "COURSE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        ["bash", str(repo / "tools" / "build_simgrid.sh"), sys.executable],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 75, done.stdout + done.stderr
    assert "not compiled: no build of SimGrid" in done.stdout
    assert not any((tmp_path / "cache" / "simgrid").glob("simgrid-*/bin")), "something was built"


def test_a_cached_simgrid_whose_compiler_is_gone_is_built_again_and_one_with_its_compiler_is_kept(tmp_path):
    """SimGrid's smpicc names the compiler by the path it was found at when built: a cached build whose compiler is
    gone from there is not taken as built (with COURSE_CACHED_ONLY=1: said in one line, status 75, marked incomplete for
    the next set-up to build again). One whose compiler is there but whose check fails stays marked complete, and the
    check's failure stops the set-up."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[1]
    venv_bin = Path(sys.executable).parent
    bin_ = tmp_path / "bin"  # where the tools get linked: a folder of the test's own, not the course's .venv/bin
    bin_.mkdir()
    for tool in ("python", "cmake"):
        (bin_ / tool).symlink_to(venv_bin / tool)
    env = {**os.environ, "COURSE_CACHED_ONLY": "1", "COURSE_CACHE_DIR": str(tmp_path / "cache")}
    run = lambda: subprocess.run(
        ["bash", str(repo / "tools" / "build_simgrid.sh"), str(bin_ / "python")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    first = run()
    assert first.returncode == 75, first.stdout + first.stderr
    prefix = Path(first.stdout.split("is cached (", 1)[1].split(")", 1)[0])
    (prefix / "bin").mkdir(parents=True)

    def cache(compiler: Path) -> None:
        """A cached build as SimGrid writes its wrappers (CC=... on a line of its own), naming `compiler`."""
        for tool, var in (("smpicc", "CC"), ("smpicxx", "CXX"), ("smpirun", "")):
            (prefix / "bin" / tool).write_text(f'#!/bin/sh\n{var and var + "=" + str(compiler)}\nexec "$CC" "$@"\n')
            (prefix / "bin" / tool).chmod(0o755)
        (prefix / ".complete").touch()

    cache(tmp_path / "gone" / "cc")
    done = run()
    assert done.returncode == 75, done.stdout + done.stderr
    assert f"names a compiler that is gone ({tmp_path / 'gone' / 'cc'})" in done.stdout
    assert "not compiled: the cached build of SimGrid" in done.stdout
    assert not (prefix / ".complete").exists()
    (tmp_path / "false").symlink_to("/bin/false")  # a compiler in place that fails: the check fails, the cache stays
    cache(tmp_path / "false")
    kept = run()
    assert kept.returncode == 1 and "SMPI check failed" in kept.stderr, kept.stdout + kept.stderr
    assert "using the cached build" in kept.stdout and (prefix / ".complete").exists()
    assert (bin_ / "smpirun").resolve() == (prefix / "bin" / "smpirun").resolve()  # linked where the check ran
