"""Fixtures for the chaos tests: worker processes, and a PostgreSQL cluster to restart."""

from tests.integration.processes import processes  # noqa: F401  (a fixture)
from tests.netns import partition  # noqa: F401  (a fixture)
from tests.pg_cluster import replicated_postgres, throwaway_postgres  # noqa: F401  (fixtures)
