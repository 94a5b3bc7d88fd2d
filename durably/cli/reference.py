"""The help of every `durably` command, generated into docs/reference/cli.md.

`python -m durably.cli.reference` rewrites the page's generated section (between its two
marker comments) from the commands' own help; with `--check` it rewrites nothing and exits 1
naming each command whose block is missing or stale. `make docs` runs the rewrite.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from durably.cli import cli

__all__ = ["BEGIN", "END", "PAGE", "Block", "blocks", "main", "problems", "render", "rewrite"]

_PURPOSE = "Generate the help of every durably command into docs/reference/cli.md."

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
BEGIN = "<!-- generated: commands -->"
END = "<!-- end generated -->"

# click fills a terminal at most 80 columns wide and leaves its last two free: this is what
# `durably ... --help` prints on any terminal of 80 columns or more, whatever the machine.
_WIDTH = 80 - 2
_BLOCK = re.compile(r"^### (durably(?: [\w-]+)*)\n\n```text\n(.*?)\n```$", re.M | re.S)


@dataclass(frozen=True, slots=True)
class Block:
    """One command's part of the page: its path (`durably runs show`) and its help."""

    path: str
    help: str

    def markdown(self) -> str:
        return f"### {self.path}\n\n```text\n{self.help}\n```\n"


def blocks(root: click.Command = cli) -> list[Block]:
    """Every command under `root`, groups before their subcommands, each level by name."""
    return [Block(ctx.command_path, ctx.command.get_help(ctx).rstrip("\n")) for ctx in _walk(root)]


def render(root: click.Command = cli) -> str:
    """The generated section: what goes between BEGIN and END."""
    return "\n\n" + "\n".join(block.markdown() for block in blocks(root)) + "\n"


def rewrite(page: str, root: click.Command = cli) -> str:
    """`page` with its generated section replaced by the help of the commands under `root`."""
    before, _, after = _split(page)
    return f"{before}{BEGIN}{render(root)}{END}{after}"


def problems(page: str, root: click.Command = cli) -> list[str]:
    """What is missing or stale in the page's generated section, a line a command."""
    written = {path: text for path, text in _BLOCK.findall(_split(page)[1])}
    found: list[str] = []
    for block in blocks(root):
        text = written.pop(block.path, None)
        if text is None:
            found.append(f"{block.path}: no block")
        elif text != block.help:
            found.append(f"{block.path}: its block is not its help")
    found.extend(f"{path}: a block, but no such command" for path in written)
    if not found and rewrite(page, root) != page:
        found.append("the generated section is not as rendered (its order or spacing)")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m durably.cli.reference", description=_PURPOSE)
    parser.add_argument("page", nargs="?", type=Path, default=PAGE, help="default: %(default)s")
    parser.add_argument(
        "--check", action="store_true", help="rewrite nothing; exit 1 if the page is stale"
    )
    options = parser.parse_args(argv)
    page: Path = options.page
    text = page.read_text(encoding="utf-8")
    try:
        found, rewritten = problems(text), rewrite(text)
    except ValueError as exc:  # no markers: nothing to rewrite or check
        print(f"{page}: {exc}", file=sys.stderr)
        return 1
    if not options.check:
        page.write_text(rewritten, encoding="utf-8")
        return 0
    for problem in found:
        print(f"{page}: {problem}", file=sys.stderr)
    if found:
        print("run `make docs` to generate the commands' help", file=sys.stderr)
    return 1 if found else 0


def _walk(
    command: click.Command, name: str = "durably", parent: click.Context | None = None
) -> Iterator[click.Context]:
    """The command's context (chained to its parents', so its usage reads `durably ...`), then
    its subcommands', depth first. Hidden commands are left out, as `--help` leaves them."""
    ctx = click.Context(command, info_name=name, parent=parent, terminal_width=_WIDTH)
    yield ctx
    if isinstance(command, click.Group):
        for sub_name in command.list_commands(ctx):
            sub = command.get_command(ctx, sub_name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, sub_name, ctx)


def _split(page: str) -> tuple[str, str, str]:
    """The page before BEGIN, between the markers, and after END."""
    before, begin, rest = page.partition(BEGIN)
    between, end, after = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page has no {BEGIN} ... {END} section")
    return before, between, after


if __name__ == "__main__":
    sys.exit(main())
