"""Every suggested command works (#24), on both stores: for each situation a run can be in,
every command durably suggests to a person about it — in the "now and next" sentence
(durably.views.explaining), in every line of the run's description (durably.views.timeline)
and in what `durably runs show` and `durably dlq show` print — is run as printed, its
placeholders filled in, as a real process against the store the run is in. None is a usage
error (exit status 2); each succeeds, or is refused with a one-line `error: ...` (exit
status 1) where a refusal is expected (EXPECTED_REFUSALS says which and why). Long-running
commands (a worker, the server) are only checked to parse, with --help.

The command line reads the real clock, the test's runs the fake one: the fake clock is set
ten minutes before the real time, and every wait, lease and beat is long or short enough that
the command line sees each run in the same situation as the test does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

import durably
from durably import RunStatus
from durably.cli import cli
from durably.stores.records import WorkerBeat
from durably.testing import FakeClock
from durably.views.explaining import explain
from durably.views.timeline import describe_run

from . import suggested_app
from .conftest import DEAD_LEASE, dying_worker
from .test_cli import durably_cli

REPO = Path(__file__).resolve().parents[2]
TARGET = "tests.integration.suggested_app:app"

# -- finding the commands in what durably says ----------------------------------------------

_IN_PARENTHESES = re.compile(r"\(([^()]*)\)")
_AFTER_A_COLON = re.compile(r":\s+(durably [^;()\n]*)")  # up to the end of the clause


def suggested_commands(text: str) -> list[str]:
    """The commands `text` suggests, in the order it says them: each text inside parentheses
    that starts with `durably `, and each text after a colon (and a space) that does, up to
    the end of its clause (a `;`, a parenthesis, the end of the line), without the full stop
    that may end the sentence. A colon inside a word (MODULE:ATTR, sqlite:///x.db, 12:03:11)
    starts nothing."""
    found = [
        (match.start(1), match.group(1).strip())
        for match in _IN_PARENTHESES.finditer(text)
        if match.group(1).strip().startswith("durably ")
    ]
    found += [
        (match.start(1), match.group(1).strip().rstrip(".,"))
        for match in _AFTER_A_COLON.finditer(text)
    ]
    return [command for _, command in sorted(found)]


def mentioned_in_passing(text: str) -> list[str]:
    """Commands `text` names where suggested_commands does not find them ("...; durably
    resume goes on"): a person cannot tell where such a command ends, nor run it as printed."""
    rest = text
    for command in suggested_commands(text):
        rest = rest.replace(command, "")
    names = "|".join(re.escape(name) for name in sorted(cli.commands))
    return re.findall(rf"\bdurably (?:{names})\b[^;()\n]*", rest)


def test_the_extractor_finds_the_commands_of_a_sentence() -> None:
    said = (
        "nothing runs until a person acts: retry (durably dlq retry o-1), skip the step with "
        "a result (durably dlq skip o-1 --result JSON) or give up (durably dlq fail o-1 "
        "--reason TEXT)"
    )
    assert suggested_commands(said) == [
        "durably dlq retry o-1",
        "durably dlq skip o-1 --result JSON",
        "durably dlq fail o-1 --reason TEXT",
    ]
    assert suggested_commands("no live worker runs it: start one (durably worker MODULE:ATTR)") == [
        "durably worker MODULE:ATTR"
    ]
    assert suggested_commands(
        "no worker is live; one must run for it to run: durably worker MODULE:ATTR --store "
        "sqlite:///shop.db."
    ) == ["durably worker MODULE:ATTR --store sqlite:///shop.db"]
    # neither a parenthesis, a time, nor a step's name is a command
    assert (
        suggested_commands(
            "waiting for a person: step durably.escalate escalated (the address is unreadable) at "
            "12:03:11, then goes on"
        )
        == []
    )
    assert mentioned_in_passing("paused by erin; durably resume goes on") == [
        "durably resume goes on"
    ]
    assert mentioned_in_passing("paused by erin (durably resume o-1)") == []


# -- the situations ---------------------------------------------------------------------------

# situation -> (the status it rests in, how many runs are put in it: the first is shown, each
# command it suggests is run on one of the others)
SITUATIONS: dict[str, tuple[RunStatus, int]] = {
    "queued": (RunStatus.PENDING, 2),
    "timer": (RunStatus.PENDING, 2),
    "signal": (RunStatus.PENDING, 2),
    "approval": (RunStatus.NEEDS_ATTENTION, 2),
    "escalation": (RunStatus.NEEDS_ATTENTION, 7),
    "needs-attention": (RunStatus.NEEDS_ATTENTION, 5),
    "failed": (RunStatus.FAILED, 3),
    "compensation-failed": (RunStatus.COMPENSATION_FAILED, 5),
    "paused": (RunStatus.PAUSED, 2),
    "cancelled": (RunStatus.CANCELLED, 2),
    "completed": (RunStatus.COMPLETED, 2),
    "stranded": (RunStatus.RUNNING, 2),
    "silent worker": (RunStatus.RUNNING, 2),
    "left behind": (RunStatus.PENDING, 2),
}

# situation -> the commands suggested (by name), at the least: a situation that stops
# suggesting one fails here, rather than passing with nothing to run
SUGGESTED: dict[str, set[str]] = {
    "queued": {"worker"},
    "timer": set(),
    "signal": {"signal"},
    "approval": {"approve"},
    "escalation": {"approve", "reject", "dlq retry", "dlq skip", "dlq fail"},
    "needs-attention": {"dlq retry", "dlq skip", "dlq fail"},
    "failed": {"runs restart"},
    "compensation-failed": {"dlq retry", "dlq skip", "dlq fail"},
    "paused": {"resume"},
    "cancelled": set(),
    "completed": set(),
    "stranded": {"worker"},
    "silent worker": {"runs release"},
    "left behind": {"upgrade"},
}

# the parked runs: `durably dlq show` is shown for them too
DEAD_LETTERS = {"approval", "escalation", "needs-attention", "compensation-failed"}

# (situation, command name) -> what its one-line refusal says, for a suggested command that a
# run in that situation refuses (a choice offered that its state takes away). None is: each
# command suggested is run on a run of its own, still in the situation it was suggested for.
EXPECTED_REFUSALS: dict[tuple[str, str], str] = {}

# commands that run until stopped: checked to parse (--help), not run
LONG_RUNNING = {"worker", "server", "ui"}

# the placeholders of a suggested command, and what a person would write for them here
FILLED = {
    "MODULE:ATTR": TARGET,
    "TEXT": "unreachable",
    "JSON": json.dumps("by hand"),  # fits every step's return type (str) and a signal
}


def ids(situation: str) -> list[str]:
    return [f"{situation.replace(' ', '-')}-{n}" for n in range(SITUATIONS[situation][1])]


def put_in_situations(app: durably.App, clock: FakeClock) -> None:
    """A few runs in each situation, on the store of `app`."""
    suggested_app.build(app, order_version="1")  # a deploy left these behind: now at 2
    clock.set(datetime.now(UTC) - timedelta(minutes=10))

    def start(workflow: str, situation: str) -> None:
        for run_id in ids(situation):
            app.start(workflow, run_id, id=run_id)

    start("sleeps", "timer")
    start("waits", "signal")
    start("asks", "approval")
    start("escalates", "escalation")
    start("parks", "needs-attention")
    start("fails", "failed")
    start("undo_fails", "compensation-failed")
    start("waits", "paused")
    start("waits", "cancelled")
    start("quick", "completed")
    start("order", "left behind")  # asleep for a day after its reservation
    app.run_until_idle()
    for run_id in ids("paused"):
        app.client.pause(run_id, by="erin", reason="stock count")
    for run_id in ids("cancelled"):
        app.client.cancel(run_id, by="erin")
    app.run_until_idle()

    for run_id in ids("stranded"):  # its worker died; its lease expires in 5 s
        app.start("quick", run_id, id=run_id)
        dying_worker(app.store, clock, ["quick"])
    now = clock.now()
    app.store.beat(WorkerBeat("silent-worker", now, now, timedelta(seconds=1), {}))
    for run_id in ids("silent worker"):  # its worker beat once, then died; an hour's lease
        app.start("quick", run_id, id=run_id)
        app.store.claim("silent-worker", ["quick"], now=now, lease=timedelta(hours=1), limit=1)
    start("quick", "queued")  # no worker runs `quick`
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    # a live worker of the deployed code, at version 2 of `order` (live for an hour: the
    # command line sees it live too)
    live = WorkerBeat(
        "live-worker", clock.now(), clock.now(), timedelta(hours=1), {"order": ("2",)}
    )
    app.store.beat(live)

    for situation, (status, _) in SITUATIONS.items():
        for run_id in ids(situation):
            assert app.client.get(run_id).status is status, (situation, run_id)


# -- running commands -------------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


# `durably ARGS` for each request, each in a process of its own forked from one that has
# imported durably once (a fresh interpreter a command costs a third of a second in imports):
# the command's own argument parsing, exit status, standard output and error, as
# `python -m durably` has them. Four at a time.
_FORKS = r"""
import json, os, sys, traceback
from durably.cli import main

requests = json.load(sys.stdin)
codes = [None] * len(requests)
running = {}

def reap():
    pid, status = os.wait()
    codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)

for n, request in enumerate(requests):
    if len(running) >= 4:
        reap()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd, path in ((1, request["out"]), (2, request["err"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
            sys.argv = ["durably", *request["args"]]
            try:
                main()
                code = 0
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
                if isinstance(exit.code, str):
                    print(exit.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    running[pid] = n
while running:
    reap()
json.dump(codes, sys.stdout)
"""


def run_commands(commands: list[tuple[str, ...]], *, store_url: str, cwd: Path) -> list[Ran]:
    """Run each `durably ARGS` as a process in `cwd`, able to import the test's app (whose
    store is `store_url`)."""
    outputs = cwd / "outputs"
    outputs.mkdir(exist_ok=True)
    requests = [
        {"args": args, "out": str(outputs / f"{n}.out"), "err": str(outputs / f"{n}.err")}
        for n, args in enumerate(commands)
    ]
    env = {k: v for k, v in os.environ.items() if k != "DURABLY_STORE"}
    env.update(PYTHONPATH=str(REPO), SUGGESTED_APP_STORE=store_url)
    forks = subprocess.run(
        [sys.executable, "-c", _FORKS],
        input=json.dumps(requests),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert forks.returncode == 0, forks.stderr
    codes = json.loads(forks.stdout)
    return [
        Ran(tuple(r["args"]), code, Path(r["out"]).read_text(), Path(r["err"]).read_text())
        for r, code in zip(requests, codes, strict=True)
    ]


def command_of(args: tuple[str, ...]) -> tuple[str, click.Command | None]:
    """The name of the command `durably ARGS` runs ("dlq retry"), and the command (None: no
    such command)."""
    command: click.Command = cli
    words: list[str] = []
    for word in args:
        if not isinstance(command, click.Group):
            break
        found = command.commands.get(word)
        if found is None:
            return " ".join([*words, word]), None
        words.append(word)
        command = found
    return " ".join(words), command


def takes(command: click.Command | None, option: str) -> bool:
    return command is not None and any(option in param.opts for param in command.params)


def as_run(printed: str, run_id: str, *, store_url: str) -> tuple[str, ...]:
    """The arguments of a suggested command (`durably ...`, its run RUN), as a person fills
    it in: its placeholders replaced, and where to find the app (--app where the command
    takes it, as its values are then checked against the app's types; else --store)."""
    words = shlex.split(printed)
    assert words[0] == "durably", printed
    args = [run_id if word == "RUN" else FILLED.get(word, word) for word in words[1:]]
    unknown = [word for word in args if re.fullmatch(r"[A-Z][A-Z_:]+", word)]
    assert not unknown, f"{printed!r}: a placeholder this test does not fill: {unknown}"
    name, command = command_of(tuple(args))
    if takes(command, "--app"):
        args += ["--app", TARGET]
    elif takes(command, "--store"):
        args += ["--store", store_url]
    if name in LONG_RUNNING:
        args.append("--help")
    return tuple(args)


# -- the test ---------------------------------------------------------------------------------


def test_every_command_durably_suggests_runs_as_printed(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    put_in_situations(app, clock)
    workers = app.client.workers()

    # what durably says about the first run of each situation: the views, then the commands
    shows = [("runs", "show", ids(situation)[0], "--app", TARGET) for situation in SITUATIONS]
    shows += [("dlq", "show", ids(situation)[0], "--app", TARGET) for situation in DEAD_LETTERS]
    shown = run_commands(shows, store_url=store_url, cwd=tmp_path)
    said: dict[str, list[str]] = {situation: [] for situation in SITUATIONS}
    for ran in shown:
        assert ran.returncode == 0, ran
        [situation] = [s for s in SITUATIONS if ran.args[2] == ids(s)[0]]
        said[situation].append(ran.stdout)
    for situation in SITUATIONS:
        run_id = ids(situation)[0]
        run, history = app.client.get(run_id), app.client.history(run_id)
        explained = explain(run, history, workers, clock.now())
        said[situation] += [explained.now, explained.next]
        said[situation] += [value for _, value in describe_run(run, history, workers, clock.now())]

    # each command suggested in a situation, once, run on a run of its own in that situation
    commands: list[tuple[str, str, tuple[str, ...]]] = []  # situation, as printed, as run
    problems: list[str] = []
    for situation, texts in said.items():
        shown_id, *others = ids(situation)
        printed: dict[str, None] = {}
        for text in texts:
            problems += [
                f"{situation}: named in passing: {m!r}" for m in mentioned_in_passing(text)
            ]
            for command in suggested_commands(text):
                printed[re.sub(rf"\b{re.escape(shown_id)}\b", "RUN", command)] = None
        names = {command_of(tuple(shlex.split(p)[1:]))[0] for p in printed}
        if not names >= SUGGESTED[situation]:
            problems.append(f"{situation}: no {sorted(SUGGESTED[situation] - names)} suggested")
        assert len(printed) <= len(others), (situation, sorted(printed))  # a run for each
        for command, run_id in zip(printed, others, strict=False):
            commands.append((situation, command, as_run(command, run_id, store_url=store_url)))

    results = run_commands([args for _, _, args in commands], store_url=store_url, cwd=tmp_path)

    for (situation, command, _), ran in zip(commands, results, strict=True):
        name = command_of(ran.args)[0]
        refusal = EXPECTED_REFUSALS.get((situation, name))
        errors = [line for line in ran.stderr.splitlines() if line.startswith("error: ")]
        if ran.returncode == 0 and refusal is None and "Traceback" not in ran.stderr:
            continue
        refused_as_expected = refusal is not None and len(errors) == 1 and refusal in errors[0]
        if ran.returncode == 1 and refused_as_expected and "Traceback" not in ran.stderr:
            continue
        problems.append(
            f"{situation}: {command!r} (run as durably {shlex.join(ran.args)}) exited "
            f"{ran.returncode}: {ran.stderr.strip() or ran.stdout.strip()}"
        )
    assert not problems, "\n".join(dict.fromkeys(problems))


def test_a_forked_command_says_what_a_fresh_process_says(
    app: durably.App, clock: FakeClock, store_url: str, tmp_path: Path
) -> None:
    """The commands above run in forks of one process that imported durably once: each says
    the same as `python -m durably` in a process of its own."""
    suggested_app.build(app)
    app.start("fails", "f-1", id="f-1")
    app.run_until_idle()

    [forked] = run_commands(
        [("runs", "show", "f-1", "--app", TARGET)], store_url=store_url, cwd=tmp_path
    )
    fresh = durably_cli(
        "runs", "show", "f-1", "--app", TARGET, cwd=tmp_path, env={"SUGGESTED_APP_STORE": store_url}
    )

    assert (forked.returncode, forked.stdout, forked.stderr) == (0, fresh.stdout, fresh.stderr)
    assert "durably runs restart f-1" in forked.stdout
