"""A dask.distributed cluster of two single-threaded worker processes, shared by the session.

Starting one takes 1 to 2 s on the 2-core test machine (plus about 2 s the first time each
worker imports jax), so tests share it; a test that kills workers starts its own with
``streamacc.run.execute._cluster.local_cluster``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def dask_client(aws_credentials: None) -> Iterator[Any]:
    """A ``distributed.Client`` on a local cluster of 2 worker processes, closed at the end.

    The workers start after the dummy S3 credentials are set, so they inherit them.
    """
    pytest.importorskip("distributed")
    from streamacc.run.execute._cluster import local_cluster

    with local_cluster(2) as client:
        yield client
