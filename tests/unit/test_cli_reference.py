"""docs/reference/cli.md carries the help of every `durably` command, as `--help` prints it,
and the check that says when it does not; the exit statuses the page documents."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from durably.cli import cli
from durably.stores import open_store
from tests.console import run_durably
from tools.docs.cli import BEGIN, END, PAGE, Block, blocks, problems, rewrite
from tools.docs.cli import main as reference_main

PAGE_TEXT = PAGE.read_text(encoding="utf-8")


# -- the reference -------------------------------------------------------------------------


def test_every_command_has_its_help_in_the_reference() -> None:
    found = problems(PAGE_TEXT)
    assert not found, (
        "docs/reference/cli.md does not carry the help of every command; run `make docs`:\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize("block", blocks(), ids=lambda block: block.path)
def test_a_block_is_what_help_prints(
    block: Block, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if not _command_at(block.path).add_help_option:
        pytest.skip(f"{block.path} hands --help on (to the benchmark)")
    monkeypatch.setenv("COLUMNS", "80")
    args = [*block.path.split()[1:], "--help"]
    assert cli.main(args, prog_name="durably", standalone_mode=False) == 0
    assert capsys.readouterr().out == block.help + "\n"


def test_the_check_names_a_command_the_page_lacks() -> None:
    undocumented = click.Command("zzz", help="A command nobody documented.")
    grown = click.Group(
        "durably",
        commands={**cli.commands, "zzz": undocumented},
        params=cli.params,
        help=cli.help,
        epilog=cli.epilog,
    )
    found = problems(PAGE_TEXT, grown)
    assert "durably zzz: no block" in found
    assert "durably: its block is stale" in found  # its list of commands grew


def test_the_check_names_a_deleted_block_and_a_stale_one() -> None:
    [show] = [block for block in blocks() if block.path == "durably runs show"]
    [start] = [block for block in blocks() if block.path == "durably start"]
    page = PAGE_TEXT.replace(show.markdown(), "").replace(
        start.help, start.help.replace("WORKFLOW", "WORK")
    )
    assert problems(page) == [
        "durably runs show: no block",
        "durably start: its block is stale",
    ]
    assert problems(rewrite(page)) == []


def test_check_exits_1_until_the_page_is_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "cli.md"
    [show] = [block for block in blocks() if block.path == "durably runs show"]
    page.write_text(PAGE_TEXT.replace(show.markdown(), ""), encoding="utf-8")
    assert reference_main([str(page), "--check"]) == 1
    assert "durably runs show: no block" in capsys.readouterr().err
    assert reference_main([str(page)]) == 0
    assert reference_main([str(page), "--check"]) == 0
    assert page.read_text(encoding="utf-8") == PAGE_TEXT


def test_a_rewrite_changes_only_the_generated_section() -> None:
    before, _, rest = PAGE_TEXT.partition(BEGIN)
    _, _, after = rest.partition(END)
    assert rewrite(f"{before}{BEGIN}{END}{after}") == PAGE_TEXT
    assert "## Exit codes" in before


# -- exit statuses ------------------------------------------------------------------------------


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'durably.db'}"
    open_store(url, create=True).close()
    return url


def test_an_unknown_run_exits_1_with_one_error_line(store_url: str) -> None:
    status, err = run_durably("runs", "show", "nobody", "--store", store_url)
    assert status == 1
    assert err.splitlines() == [f"error: no run has the id 'nobody' in {store_url}"]


def test_a_bad_option_exits_2_after_the_usage(store_url: str) -> None:
    status, err = run_durably("runs", "show", "nobody", "--store", store_url, "--bogus")
    assert status == 2
    usage, hint, error = err.splitlines()
    assert (usage, hint) == (
        "Usage: durably runs show [OPTIONS] RUN_ID",
        "Try 'durably runs show --help' for help.",
    )
    assert error.startswith("error: No such option")  # then click's words, which vary
    assert "--bogus" in error


def _command_at(path: str) -> click.Command:
    command: click.Command = cli
    for name in path.split()[1:]:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command
