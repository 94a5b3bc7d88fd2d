"""What a PostgreSQL store URL says to durably (durably.stores.postgres.options): taken out
before libpq sees the URL, checked, and combined; pgbouncer=transaction turns off what a
transaction pooler cannot carry."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

import pytest

from durably.errors import ConfigError
from durably.stores.postgres import partitions
from durably.stores.postgres.options import store_options

URL = "postgresql://app@db.internal:6432/shop"


def test_a_plain_url_listens_where_it_connects() -> None:
    options = store_options(f"{URL}?sslmode=require")
    assert options.url == f"{URL}?sslmode=require"
    assert (options.synchronous_commit, options.transaction_pooling) == (None, False)
    assert options.listen_url == options.url


def test_durablys_options_are_taken_out_and_the_others_kept_byte_for_byte() -> None:
    direct = quote("postgresql://app:p%40ss@db.internal:5432/shop?sslmode=require", safe="")
    options = store_options(
        f"{URL}?sslmode=require&pgbouncer=transaction&application_name=a%20b&listen_url={direct}"
    )
    assert options.url == f"{URL}?sslmode=require&application_name=a%20b"
    assert options.transaction_pooling
    # decoded once: the direct URL's own escapes are its own again
    assert options.listen_url == "postgresql://app:p%40ss@db.internal:5432/shop?sslmode=require"


def test_behind_a_transaction_pooler_without_a_listen_url_nothing_listens() -> None:
    options = store_options(f"{URL}?pgbouncer=transaction")
    assert (options.url, options.transaction_pooling, options.listen_url) == (URL, True, None)


def test_session_pooling_changes_nothing() -> None:
    options = store_options(f"{URL}?pgbouncer=session")
    assert (options.url, options.transaction_pooling, options.listen_url) == (URL, False, URL)


def test_keywords_win_over_the_url() -> None:
    options = store_options(
        f"{URL}?pgbouncer=session&listen_url=postgresql://a@b/c",
        pgbouncer="transaction",
        listen_url="postgresql://app@db.internal:5432/shop",
    )
    assert options.transaction_pooling
    assert options.listen_url == "postgresql://app@db.internal:5432/shop"


def test_statement_pooling_is_refused_with_why() -> None:
    with pytest.raises(ConfigError, match="statement pooling allows no transaction"):
        store_options(f"{URL}?pgbouncer=statement")
    with pytest.raises(ConfigError, match=r"pgbouncer='yes' .*use transaction"):
        store_options(f"{URL}?pgbouncer=yes")


def test_synchronous_commit_goes_on_the_role_behind_a_transaction_pooler() -> None:
    # A SET would stay on whichever server connection ran it, for whichever client is next.
    with pytest.raises(ConfigError, match="ALTER ROLE <durably's role> SET synchronous_commit"):
        store_options(f"{URL}?pgbouncer=transaction&synchronous_commit=off")
    assert store_options(f"{URL}?synchronous_commit=off").synchronous_commit == "off"
    with pytest.raises(ConfigError, match=r"synchronous_commit='maybe'"):
        store_options(f"{URL}?synchronous_commit=maybe")


def test_a_listen_url_that_is_no_url_is_refused_when_the_store_opens() -> None:
    with pytest.raises(ConfigError, match="listen_url is not a PostgreSQL URL"):
        store_options(f"{URL}?pgbouncer=transaction&listen_url=nonsense")


def test_the_history_partition_width_is_taken_out_of_the_url() -> None:
    options = store_options("postgresql://h/db?history_partition=7d&sslmode=require")
    assert options.history_partition == timedelta(days=7)
    assert options.url == "postgresql://h/db?sslmode=require"
    assert store_options("postgresql://h/db").history_partition == timedelta(days=1)


@pytest.mark.parametrize("width", ["5m", "400d", "90s30ms", "soon"])
def test_a_history_partition_width_that_will_not_do_is_refused(width: str) -> None:
    with pytest.raises(ConfigError, match="history_partition"):
        store_options(f"postgresql://h/db?history_partition={width}")


def test_partition_ranges_are_aligned_on_the_epoch_and_named_by_their_start() -> None:
    day = timedelta(days=1)
    ranges = partitions.ranges_ahead(86_400 * 3 + 5, day)
    assert ranges[0] == (86_400 * 3, 86_400 * 4)
    assert len(ranges) == partitions.AHEAD + 1
    assert partitions.name_of(ranges[0][0], day) == "durably_events_19700104"
    assert partitions.name_of(3_600, timedelta(hours=12)) == "durably_events_19700101_0100"
