"""A stream reader in a process of its own, for the stream crash tests:

    python -m tests.chaos.outputs_reader STORE_URL RUN_ID KEY OUT_FILE

Reads the run's stream with handle.read_stream (woken by the store) until it ends, writing
each value to OUT_FILE as a line as it comes, then a last line "end"."""

from __future__ import annotations

import json
import sys

import durably


def main(url: str, run_id: str, key: str, out: str) -> None:
    app = durably.App(url)
    handle = durably.RunHandle(app.client, run_id)
    with open(out, "w") as lines:
        for value in handle.read_stream(key, timeout=60):
            lines.write(json.dumps(value) + "\n")
            lines.flush()
        lines.write("end\n")
    app.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
