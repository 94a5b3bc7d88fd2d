"""`durably migrate`, run as a real process on both stores: it creates or migrates the schema
and says from which version to which, `--check` changes nothing and exits 1 while a migration
is pending, and under $DURABLY_MIGRATE=never only `durably migrate` changes the schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from durably.stores.sql.schema import LATEST_VERSION
from tests.contract.support import execute_sql, older_schema

from .test_cli import APP, durably_cli, refused

_VERSION = "SELECT value FROM durably_meta WHERE key = 'schema_version'"


def test_durably_migrate_creates_the_schema_then_finds_it_current(
    store_url: str, tmp_path: Path
) -> None:
    pending = durably_cli("migrate", "--check", "--store", store_url, cwd=tmp_path)
    refused(pending, 1, "durably store")  # none yet: "there is no" (SQLite), "is not a" (PG)

    created = durably_cli("migrate", "--store", store_url, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert f"created the durably schema in {store_url}" in created.stdout
    assert f"at version {LATEST_VERSION}" in created.stdout

    again = durably_cli("migrate", "--store", store_url, cwd=tmp_path)
    assert f"is at version {LATEST_VERSION} already: nothing to do" in again.stdout

    current = durably_cli("migrate", "--check", "--store", store_url, cwd=tmp_path)
    assert current.returncode == 0, current.stderr
    assert f"is at version {LATEST_VERSION}: current" in current.stdout


def test_an_older_schema_is_refused_by_commands_until_durably_migrate_runs(
    store_url: str, tmp_path: Path
) -> None:
    older_schema(store_url, 6)
    behind = f"is at version 6, but this durably needs version {LATEST_VERSION}: run `durably"

    refused(durably_cli("migrate", "--check", "--store", store_url, cwd=tmp_path), 1, behind)
    refused(durably_cli("runs", "list", "--store", store_url, cwd=tmp_path), 1, behind)
    assert execute_sql(store_url, _VERSION) == [("6",)]  # reading changed nothing

    migrated = durably_cli("migrate", "--store", store_url, cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    assert f"from version 6 to {LATEST_VERSION}" in migrated.stdout
    listed = durably_cli("runs", "list", "--store", store_url, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr


def test_durably_migrate_never_keeps_durably_start_from_creating_a_store(
    store_url: str, tmp_path: Path
) -> None:
    never = {"DURABLY_MIGRATE": "never"}
    start = ("start", "count", "--app", APP, "--store", store_url, "--input", "[1]")

    refused(durably_cli(*start, cwd=tmp_path, env=never), 1, "durably store")

    made = durably_cli("migrate", "--store", store_url, cwd=tmp_path, env=never)
    assert made.returncode == 0, made.stderr
    started = durably_cli(*start, cwd=tmp_path, env=never)
    assert started.returncode == 0, started.stderr
    assert "created run" in started.stdout


@pytest.mark.parametrize("setting", ["sometimes", "no"])
def test_an_unknown_durably_migrate_setting_is_refused(
    sqlite_url: str, tmp_path: Path, setting: str
) -> None:
    start = ("start", "count", "--app", APP, "--store", sqlite_url, "--input", "[1]")

    result = durably_cli(*start, cwd=tmp_path, env={"DURABLY_MIGRATE": setting})

    refused(result, 1, f"$DURABLY_MIGRATE is {setting!r}: use auto")
