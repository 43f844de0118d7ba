"""Shared test settings: tests that need Horovod skip where it could not be built, except in CI."""

from __future__ import annotations

import os

import pytest

from utils import launch

HOROVOD, WHY_NOT = launch.horovod_available()
#: CI (CI=true, as .ci/run sets) and COURSE_REQUIRE_HOROVOD=1 must have Horovod: its tests run there and fail.
HOROVOD_REQUIRED = os.environ.get("CI") == "true" or os.environ.get("COURSE_REQUIRE_HOROVOD") == "1"
needs_horovod = pytest.mark.skipif(not HOROVOD and not HOROVOD_REQUIRED, reason=WHY_NOT)
