"""Property tests of the HTTP API against its own published OpenAPI schema (schemathesis):
for every operation, requests generated from the schema (fitting it, and not) are sent to the
real server with a write token; none may make it fail (5xx) or answer outside the schema.

A few examples per operation in the default run (about 10 s a store); many more in the slow
run (`make slow`), which is where a new 500 is likelier to be found."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import Live

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

QUICK, DEEP = 8, 100  # examples per operation: about 30 operations, on each store


@pytest.mark.parametrize(
    "examples", [QUICK, pytest.param(DEEP, marks=[pytest.mark.slow, pytest.mark.timeout(900)])]
)
def test_no_generated_request_makes_the_server_fail(live: Live, examples: int) -> None:
    live.app.start("checkout", "o-1", 1, id="o-1")  # a run for the routes that take one
    schema = schemathesis.openapi.from_url(f"{live.url}/api/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 25
    for operation in operations:
        _exercise(live, operation.as_strategy(), examples)


def _exercise(live: Live, strategy: st.SearchStrategy[schemathesis.Case], examples: int) -> None:
    """Generated requests of one operation, each checked."""

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def one(data: st.DataObject) -> None:
        case = data.draw(strategy)
        response = case.call(headers=live.headers())
        where = f"{case.method} {case.formatted_path}"
        assert response.status_code < 500, f"{where}: {response.status_code} {response.text}"
        # A cursor is opaque (of runs, of the audit trail): any string fits the schema, and one
        # durably did not give out is refused (422), which the positive-data check would count
        # as a valid request rejected.
        opaque = case.method == "GET" and case.path in ("/api/runs", "/api/audit")
        # A bulk action's rules span fields, which the schema cannot say: a filter that names
        # nothing needs all=true, since comes before until, only a cancel or a pause takes a
        # reason; a body that breaks one is refused (422), naming it.
        spanning = case.method == "POST" and case.path == "/api/runs/bulk"
        # A webhook's URL must be http(s) with a host, and its events kinds durably knows
        # (durably.core.webhooks), which the schema says in words: others are refused (422).
        spanning |= case.method == "POST" and case.path == "/api/webhooks"
        case.validate_response(
            response,
            excluded_checks=[positive_data_acceptance] if opaque or spanning else None,
        )

    one()
