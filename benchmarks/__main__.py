"""The benchmarks' one command, `python -m benchmarks NAME... [--quick] [--repeat N]
[--stores sqlite postgres] [--workloads W...]` (--list lists them), runs the benchmarks named,
in order (only the workloads named, with --workloads): the table to stdout, progress to
stderr, every sample, the machine, the date and the durability settings to
benchmarks/results/<name>[-fast]-latest.json. Without a reachable PostgreSQL server
($DURABLY_BENCH_POSTGRES, or postgresql://postgres@127.0.0.1:5432/test) its rows are skipped.
"""

import argparse
import sys
import textwrap
from collections.abc import Sequence

from benchmarks.harness import run
from benchmarks.registry import BENCHES, filled


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        "python -m benchmarks", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=", ".join(BENCHES))
    parser.add_argument("--list", action="store_true", help="what each benchmark measures")
    parser.add_argument("--repeat", type=int, default=0, help="repetitions (default: its own)")
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument(
        "--workloads", nargs="+", metavar="WORKLOAD", help="only these (--list names them)"
    )
    both = ["sqlite", "postgres"]
    parser.add_argument("--stores", nargs="+", choices=both, default=both, help="(default: both)")
    parser.add_argument("--engines", nargs="+", choices=["durably", "dbos"], help="side by side")
    parser.add_argument("--fast", action="store_true", help="side by side: SQLite NORMAL, PG off")
    parser.add_argument("--dbos-queue-poll-ms", type=float, help="DBOS's queue poll (default 200)")
    parser.add_argument("--fill-runs", type=int, help="large: finished runs in the filled store")
    args = parser.parse_args(argv)
    if args.list:
        for bench in BENCHES.values():
            workloads = ", ".join(w.name for w in bench.workloads)
            times = "1 repetition" if bench.repeat == 1 else f"{bench.repeat} repetitions"
            print(f"{bench.name}: {workloads} ({times} by default)")
            print(textwrap.fill(bench.about, 88, initial_indent="    ", subsequent_indent="    "))
        return 0
    if not args.names or set(args.names) - set(BENCHES) or args.repeat < 0:
        parser.error(f"name benchmarks among {', '.join(BENCHES)}; --repeat is at least 1")
    known = {w.name for name in args.names for w in BENCHES[name].workloads}
    if unknown := set(args.workloads or ()) - known:
        parser.error(f"no workload {', '.join(sorted(unknown))} in {', '.join(args.names)}")
    if args.fill_runs is not None and (args.fill_runs < 1 or "large" not in args.names):
        parser.error("--fill-runs is the large benchmark's, at least 1")
    return max(run(filled(BENCHES[name], args.fill_runs), args) for name in args.names)


if __name__ == "__main__":
    sys.exit(main())
