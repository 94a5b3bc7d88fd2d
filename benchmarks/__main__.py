"""The benchmarks' one command:

    python -m benchmarks NAME... [--quick] [--repeat N] [--stores sqlite,postgres]
    python -m benchmarks --list

runs the benchmarks named, in order (make bench WHAT="core scaling"; durably bench runs
compare): the table to stdout, progress to stderr, every sample, the machine, the date and the
durability settings to benchmarks/results/<name>[-fast]-latest.json. Without a reachable
PostgreSQL server ($DURABLY_BENCH_POSTGRES, or postgresql://postgres@127.0.0.1:5432/test) its
rows are skipped with a note.
"""

import argparse
import sys
import textwrap
from collections.abc import Sequence

from benchmarks.harness import run
from benchmarks.registry import BENCHES

ENGINES, STORES = ("durably", "dbos"), ("sqlite", "postgres")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        "python -m benchmarks", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(BENCHES))
    parser.add_argument("--list", action="store_true", help="what each benchmark measures")
    parser.add_argument("--repeat", type=int, help="repetitions of each (default: its own)")
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument(
        "--stores", default=",".join(STORES), help="comma-separated: sqlite,postgres"
    )
    parser.add_argument("--engines", help="side by side: comma-separated, durably,dbos")
    parser.add_argument(
        "--fast", action="store_true", help="side by side: SQLite NORMAL, PostgreSQL off"
    )
    parser.add_argument("--dbos-queue-poll-ms", type=float, help="DBOS's queue poll (default 200)")
    args = parser.parse_args(argv)
    if args.list:
        for bench in BENCHES.values():
            workloads = ", ".join(w.name for w in bench.workloads)
            times = "1 repetition" if bench.repeat == 1 else f"{bench.repeat} repetitions"
            print(f"{bench.name}: {workloads} ({times} by default)")
            print(textwrap.fill(bench.about, 88, initial_indent="    ", subsequent_indent="    "))
        return 0
    args.stores, args.engines = split(args.stores), args.engines and split(args.engines)
    for option, given, known in [
        ("names", args.names, tuple(BENCHES)),
        ("stores", args.stores, STORES),
        ("engines", args.engines or (), ENGINES),
    ]:
        if unknown := set(given) - set(known):
            parser.error(f"unknown {option}: {', '.join(unknown)} (known: {', '.join(known)})")
    if not args.names or (args.repeat or 1) < 1:
        parser.error("name a benchmark (--list lists them); --repeat is at least 1")
    return max(run(BENCHES[name], args) for name in args.names)


def split(option: str) -> tuple[str, ...]:
    """A comma-separated option's items."""
    return tuple(item.strip() for item in option.split(",") if item.strip())


if __name__ == "__main__":
    sys.exit(main())
