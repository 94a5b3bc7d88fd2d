"""The help of every `durably` command, generated into docs/reference/cli.md.

`python -m tools.docs.cli` rewrites the page's generated section (between its two
marker comments) from the commands' own help; with `--check` it rewrites nothing and exits 1
naming each command whose block is missing or stale. `make docs` runs the rewrite.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from durably.cli import cli
from tools.docs import pages
from tools.docs.pages import stale_blocks

__all__ = ["BEGIN", "END", "PAGE", "Block", "blocks", "main", "problems", "render", "rewrite"]

_PURPOSE = "Generate the help of every durably command into docs/reference/cli.md."

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"
BEGIN = "<!-- generated: commands -->"
END = pages.END
SECTION = pages.Section(PAGE, BEGIN)

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
    return SECTION.replace(page, render(root))


def problems(page: str, root: click.Command = cli) -> list[str]:
    """What is missing or stale in the page's generated section, a line a command."""
    written = dict(_BLOCK.findall(SECTION.split(page)[1]))
    expected = [(block.path, block.help) for block in blocks(root)]
    found = stale_blocks(expected, written, what="command")
    if not found and rewrite(page, root) != page:
        found.append("the generated section is not as rendered (its order or spacing)")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    return SECTION.main(
        argv,
        prog="python -m tools.docs.cli",
        purpose=_PURPOSE,
        check=problems,
        rewrite=rewrite,
        hint="run `make docs` to generate the commands' help",
    )


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


if __name__ == "__main__":
    sys.exit(main())
