from __future__ import annotations

from collections.abc import Iterator

import pytest

from .cluster import postgres_cluster


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    with postgres_cluster() as dsn:
        yield dsn
