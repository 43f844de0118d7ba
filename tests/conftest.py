"""Shared test settings: tests that need Horovod skip where it could not be built, except in CI."""

from __future__ import annotations

import os

import pytest

from utils import launch

HOROVOD, WHY_NOT = launch.horovod_available()
#: CI (CI=true, as .ci/run sets) and COURSE_REQUIRE_HOROVOD=1 must have Horovod: its tests run there and fail.
HOROVOD_REQUIRED = os.environ.get("CI") == "true" or os.environ.get("COURSE_REQUIRE_HOROVOD") == "1"
needs_horovod = pytest.mark.skipif(not HOROVOD and not HOROVOD_REQUIRED, reason=WHY_NOT)


@pytest.fixture
def no_aws_credentials(monkeypatch, tmp_path):
    """No AWS credentials anywhere boto3 looks: variables, config files or an instance's metadata service."""
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


def _cpu_seconds() -> float:
    import resource

    own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With COURSE_TEST_CPU=FILE, each test's CPU seconds (its own and those of the processes it started and
    waited for; setup and teardown included) are appended to FILE as `seconds<TAB>test id`: on a 2-core machine
    the CPU a test takes, not its wall time, decides how long the whole suite runs."""
    record = os.environ.get("COURSE_TEST_CPU")
    before = _cpu_seconds() if record else 0.0
    result = yield
    if record:
        with open(record, "a") as out:
            out.write(f"{_cpu_seconds() - before:.2f}\t{item.nodeid}\n")
    return result
