"""Engine runners: the same workloads, written once per engine, run one measurement per process.

The harness drives an engine through a runner adapter (the `Runner` protocol of
benchmarks.runners.protocol): durably in the harness's own process (runners.inprocess, for
benchmarks.core and .scaling), or an engine's runner module in a fresh process per
measurement (runners.processes, for benchmarks.compare), so that engines never share an
interpreter (DBOS is a process-wide singleton); the engines take turns going first from one
repetition to the next, so that machine drift hits both alike. A runner module is run as

    python -m benchmarks.runners.<engine>_runner <command> --url URL [options]

`--url` names an empty store made for this one measurement: `sqlite:////abs/dir/engine.db`
(the directory exists, the file does not) or `postgresql://postgres@127.0.0.1:5432/<db>`
(a fresh, empty database). Every runner keeps SQLite in WAL mode with synchronous=FULL and
PostgreSQL with synchronous_commit=on unless `--fast` is given (then NORMAL / off).

A runner prints progress to stderr and exactly one JSON object, on the last line of
stdout, with the figures below (seconds as floats, from time.perf_counter unless said).
It exits non-zero, naming what went wrong, if the engine did not do the work (a missing
result, a wrong value): a figure must never come from work that was not done.

Commands (every workflow's steps are trivial async functions unless said; options in
brackets have these defaults):

  throughput --workflows N --steps S --concurrency C
      Start N workflows of S steps (each step returns x + 1; the workflow returns the
      input + S) and run them with at most C in flight. Checks every result.
      -> {"start_seconds": float | null, "total_seconds": float, "completed": N}
      total_seconds: from the first start to the last completion (start included);
      start_seconds: the part spent starting runs, null where starting and running
      cannot be told apart.

  w3-work --workflows 500 --steps 10 --sleep-ms 10 --concurrency 32 --effects PATH
      Start every workflow durably, then run them. Each step sleeps sleep-ms
      (asyncio.sleep) and then applies a keyed side effect: benchmarks.runners.effects.
      apply(PATH, key) with key f"{workflow_index}:{step_index}". Prints the line
      {"started": N} on stdout once all N are durably started, then works until killed
      (the harness SIGKILLs it when half of the effects are applied).
  w3-recover (same options)
      A new process on the same store: recover every unfinished workflow and run it to
      the end, then print {"ready_seconds": import+open+ready, "completed": <completed
      workflows in the store>, "recovered_seconds": from process start to all complete}
      and exit. The harness times spawn -> that line itself, and counts lost runs
      (N - completed) and duplicate effects from PATH.

  queue-hop --hops 30 --mode in-process|cross-process
      An idle worker is running (in this process for in-process; a child process of this
      runner for cross-process, with the client here). For each hop: t0 = time.time();
      enqueue one workflow whose first step returns time.time() - t0; wait for its result;
      sleep 50 ms (idle again). -> {"hop_ms": [float, ...]}
  queue-throughput --workflows 1000 --concurrency 32
      A worker is running in this process; enqueue N one-step workflows as fast as the
      client can, and time from the first enqueue to the last completion.
      -> {"total_seconds": float, "completed": N}

  cold-start
      -> {"ready_seconds": float}: from before importing the engine to the engine being
      open on the store and ready to run work (migrations done).

This package imports nothing: `python -m` imports it before a runner's cold-start clock starts.
"""
