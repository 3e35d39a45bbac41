"""A :class:`~load.cluster.hosts.Cluster` for a test module, or the module skipped where none can be built."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.netns import unavailable_reason
from load.cluster.hosts import Cluster, ClusterConfig, missing_tools


def running_cluster(config: ClusterConfig) -> Iterator[Cluster]:
    """The body of a module-scoped fixture: the cluster started, yielded, then torn down."""
    # asked here, not at collection: the question makes (and removes) a namespace
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no network namespaces here: {reason}")
    missing = missing_tools()
    if missing:
        pytest.skip(f"the cluster needs {', '.join(missing)} (.ci/run installs them)")
    with Cluster(config) as running:
        yield running
