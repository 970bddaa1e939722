from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from memora_plugin_postgres.testing import ClusterUnavailable, temporary_cluster


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A real PostgreSQL server for the session; a loud skip where none can run — and a
    failure under CI=true, where these tests must run."""
    try:
        with temporary_cluster() as dsn:
            yield dsn
    except ClusterUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"PostgreSQL tests cannot run: {exc} (CI must not skip them)")
        pytest.skip(f"PostgreSQL tests SKIPPED: {exc}")
