"""Reference pages whose middle is generated from the code (the CLI's help, the HTTP API's
schema): the section between two marker comments, what is missing or stale in it, and the
`python -m ... [--check]` entry point that rewrites it or says what `make docs` would change.
Prose written by people stays outside the markers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Section", "stale_blocks"]

END = "<!-- end generated -->"


@dataclass(frozen=True, slots=True)
class Section:
    """The generated part of `page`, between `begin` and `end`."""

    page: Path
    begin: str
    end: str = END

    def split(self, text: str) -> tuple[str, str, str]:
        """The page before the section, the section, and after it; ValueError without it."""
        before, begin, rest = text.partition(self.begin)
        between, end, after = rest.partition(self.end)
        if not begin or not end:
            raise ValueError(f"the page has no {self.begin} ... {self.end} section")
        return before, between, after

    def replace(self, text: str, section: str) -> str:
        before, _, after = self.split(text)
        return f"{before}{self.begin}{section}{self.end}{after}"

    def main(
        self,
        argv: Sequence[str] | None,
        *,
        prog: str,
        purpose: str,
        check: Callable[[str], list[str]],
        rewrite: Callable[[str], str],
        hint: str,
    ) -> int:
        """Rewrite the page (or with --check, rewrite nothing and exit 1 naming each problem
        `check` finds, then `hint`)."""
        parser = argparse.ArgumentParser(prog=prog, description=purpose)
        parser.add_argument(
            "page", nargs="?", type=Path, default=self.page, help="default: %(default)s"
        )
        parser.add_argument(
            "--check", action="store_true", help="rewrite nothing; exit 1 if the page is stale"
        )
        options = parser.parse_args(argv)
        page: Path = options.page
        text = page.read_text(encoding="utf-8")
        try:
            found, rewritten = check(text), rewrite(text)
        except ValueError as exc:  # no markers: nothing to rewrite or check
            print(f"{page}: {exc}", file=sys.stderr)
            return 1
        if not options.check:
            page.write_text(rewritten, encoding="utf-8")
            return 0
        for problem in found:
            print(f"{page}: {problem}", file=sys.stderr)
        if found:
            print(hint, file=sys.stderr)
        return 1 if found else 0


def stale_blocks(
    expected: Sequence[tuple[str, str]], written: Mapping[str, str], *, what: str
) -> list[str]:
    """Each heading whose block is missing, differs from `expected`, or names no `what`."""
    left = dict(written)
    found: list[str] = []
    for heading, text in expected:
        had = left.pop(heading, None)
        if had is None:
            found.append(f"{heading}: no block")
        elif had != text:
            found.append(f"{heading}: its block is stale")
    found.extend(f"{heading}: a block, but no such {what}" for heading in left)
    return found
