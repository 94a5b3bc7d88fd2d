"""The schema, one definition for both databases, and its versions (applied by
durably.stores.sql.migrating).

Times are stored as UTC seconds since the epoch (float) in both stores, so that due-time
queries compare numbers the engine passed in, never the database's own clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from durably.core.priority import MAX_PRIORITY, PRIORITY_STEP_SECONDS
from durably.core.webhooks import KIND_OF_STATUS

__all__ = [
    "BIRTH",
    "CHANGES_TRIGGERS",
    "CLAIM_RANK",
    "CREATE_META",
    "LATEST_VERSION",
    "SQLITE_NOTICES_TRIGGER",
    "migrations",
]

CREATE_META = "CREATE TABLE IF NOT EXISTS durably_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"

_V1 = [
    """CREATE TABLE durably_runs (
        id TEXT PRIMARY KEY,
        workflow TEXT NOT NULL,
        status TEXT NOT NULL,
        input TEXT NOT NULL,
        result TEXT,
        error_class TEXT,
        error_message TEXT,
        created_at {real} NOT NULL,
        updated_at {real} NOT NULL,
        available_at {real},
        lease_owner TEXT,
        lease_epoch BIGINT NOT NULL DEFAULT 0,
        event_count INTEGER NOT NULL DEFAULT 0
    )""",
    # Only runs a worker could claim (pending or running, and a parked run of a workflow
    # with a deadline, which wakes at it) have available_at; finished runs leave the index,
    # so claiming stays flat however many runs the store holds.
    "CREATE INDEX durably_runs_claimable ON durably_runs (available_at)"
    " WHERE available_at IS NOT NULL",
    "CREATE INDEX durably_runs_by_status ON durably_runs (status, updated_at)",
    """CREATE TABLE durably_events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        position INTEGER,
        name TEXT,
        attempt INTEGER,
        data TEXT,
        at {real} NOT NULL,
        PRIMARY KEY (run_id, seq)
    ){without_rowid}""",
    # A second writer of the same step's outcome is refused by the database itself.
    "CREATE UNIQUE INDEX durably_events_one_outcome ON durably_events (run_id, position)"
    " WHERE kind = 'step_completed'",
]

_V2 = [
    # Shared state of circuit breakers and limits, one JSON document per dependency,
    # changed under the row's lock (see durably.resilience).
    "CREATE TABLE durably_gates (name TEXT PRIMARY KEY, state TEXT NOT NULL)",
]

_V3 = [
    # Commands from outside a run (signals, cancel, approvals...): any process writes them
    # here; the lease holder folds them into the history and deletes them in the same fenced
    # commit (durably.stores.sql.inbox).
    """CREATE TABLE durably_inbox (
        id {identity},
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        name TEXT,
        data TEXT,
        sender TEXT NOT NULL,
        dedupe_key TEXT,
        sent_at {real} NOT NULL
    )""",
    "CREATE INDEX durably_inbox_by_run ON durably_inbox (run_id, id)",
    "CREATE UNIQUE INDEX durably_inbox_once ON durably_inbox (run_id, dedupe_key)"
    " WHERE dedupe_key IS NOT NULL",
    # Undelivered messages per run: a claim reads the inbox only of runs that have mail, so
    # claiming a run without any costs no extra query.
    "ALTER TABLE durably_runs ADD COLUMN inbox INTEGER NOT NULL DEFAULT 0",
]

_V4 = [
    # The run that started this one as its child (durably.start_child): a parent's cancel is
    # delivered only to its own children.
    "ALTER TABLE durably_runs ADD COLUMN parent TEXT",
    "CREATE INDEX durably_runs_by_parent ON durably_runs (parent) WHERE parent IS NOT NULL",
]

# The order in which due runs are claimed (durably.core.priority): the due time, less a
# minute per level of priority. Indexed as it is written here: a query that filters or sorts
# by this text uses the index (both databases match an index's expression by its text).
CLAIM_RANK = f"(available_at - priority * {PRIORITY_STEP_SECONDS})"

_V5 = [
    # durably.start(..., priority=N): claimed ahead of runs that became due less than N
    # minutes before it. Claims scan this index from the lowest rank; a run's rank is never
    # after its due time (priorities are not negative), so `rank <= now` bounds the scan.
    "ALTER TABLE durably_runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0"
    f" CHECK (priority BETWEEN 0 AND {MAX_PRIORITY})",
    "DROP INDEX durably_runs_claimable",
    f"CREATE INDEX durably_runs_claim_rank ON durably_runs ({CLAIM_RANK})"
    " WHERE available_at IS NOT NULL",
]

_V6 = [
    # The version of its workflow a run was started on (durably.workflow.versions): only
    # workers that serve it claim it. NULL for runs started before versions were recorded:
    # any worker may.
    "ALTER TABLE durably_runs ADD COLUMN version TEXT",
    # Live workers, each beating every third of its lease: what `durably workers` lists, and
    # whom `runs show` names as able to run a run's version.
    """CREATE TABLE durably_workers (
        name TEXT PRIMARY KEY,
        started_at {real} NOT NULL,
        seen_at {real} NOT NULL,
        beat_seconds {real} NOT NULL,
        serves TEXT NOT NULL
    )""",
    # Schedules' state (durably.core.schedules), one JSON document each, changed under the
    # row's lock like a gate's.
    "CREATE TABLE durably_schedules (name TEXT PRIMARY KEY, state TEXT NOT NULL)",
    # durably.patched decisions, found by patch without reading every history.
    "CREATE INDEX durably_events_patches ON durably_events (name, run_id)"
    " WHERE kind = 'patch_decided'",
]

_V7 = [
    # The correlation id given to start() (or the caller's trace id): searched for by people
    # and tools that know the request, not the run. Children inherit it.
    "ALTER TABLE durably_runs ADD COLUMN correlation_id TEXT",
    "CREATE INDEX durably_runs_correlation ON durably_runs (correlation_id)"
    " WHERE correlation_id IS NOT NULL",
]

_V8 = [
    # The audit trail (durably.core.audit): who did what to which run, how and when, written
    # in the transaction of the write that does it, and only ever appended to (pruning runs
    # keeps it). Read newest first, by time, by who acted, or by run.
    """CREATE TABLE durably_audit (
        id {identity},
        at {real} NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        via TEXT NOT NULL,
        run_id TEXT,
        workflow TEXT,
        detail TEXT
    )""",
    "CREATE INDEX durably_audit_by_time ON durably_audit (at, id)",
    "CREATE INDEX durably_audit_by_actor ON durably_audit (actor, at, id)",
    "CREATE INDEX durably_audit_by_run ON durably_audit (run_id, at, id) WHERE run_id IS NOT NULL",
]

_V9 = [
    # Flow control (durably.core.queues). The queue a run is on (NULL: the default queue, so
    # that its runs stay out of the two indexes below and cost nothing more to claim) and its
    # key (a customer, a tenant), which a queue's per-key limits and fairness go by.
    "ALTER TABLE durably_runs ADD COLUMN queue TEXT",
    "ALTER TABLE durably_runs ADD COLUMN queue_key TEXT",
    # A named queue's claimable runs, in claim order: a worker that serves it reads them
    # without passing over the default queue's.
    f"CREATE INDEX durably_runs_queued ON durably_runs (queue, {CLAIM_RANK})"
    " WHERE available_at IS NOT NULL AND queue IS NOT NULL",
    # A named queue's claimable runs by key, in claim order: a claim of a limited queue steps
    # from key to key (a skip scan) and reads each key's first due runs.
    f"CREATE INDEX durably_runs_keyed ON durably_runs (queue, queue_key, {CLAIM_RANK})"
    " WHERE available_at IS NOT NULL AND queue IS NOT NULL",
    # A named queue's runs that hold a worker now, by key: the slots its limits count.
    "CREATE INDEX durably_runs_busy ON durably_runs (queue, queue_key)"
    " WHERE status = 'running' AND queue IS NOT NULL",
    # Runs by key, newest first: `durably runs list --key` and bulk actions by key.
    "CREATE INDEX durably_runs_by_key ON durably_runs (queue_key, updated_at)"
    " WHERE queue_key IS NOT NULL",
    # When a run was first claimed (NULL: not yet), and a named queue's runs by it: what its
    # rate limits count (runs that began in the window).
    "ALTER TABLE durably_runs ADD COLUMN began_at {real}",
    "CREATE INDEX durably_runs_began ON durably_runs (queue, began_at)"
    " WHERE began_at IS NOT NULL AND queue IS NOT NULL",
    # The queues each worker serves (JSON list; NULL: a worker of before queues, all of them).
    "ALTER TABLE durably_workers ADD COLUMN queues TEXT",
    # Custom attributes (durably.core.attributes): strings a start records with its run, in
    # the clear, to find runs by; written in the transaction that creates the run, deleted
    # with it. Read a page's at once by run id (the primary key); searched by name and value.
    """CREATE TABLE durably_attributes (
        run_id TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (run_id, name)
    ){without_rowid}""",
    "CREATE INDEX durably_attributes_by_value ON durably_attributes (name, value, run_id)",
    # Bulk jobs (durably.core.bulk): a person's action on every run a filter matched when the
    # job was made. Its progress counts are kept with it, changed in the transactions that
    # settle its runs; `fingerprint` (the action and the filter) finds an unfinished job of the
    # same person to resume instead of making a second one.
    """CREATE TABLE durably_bulk_jobs (
        id TEXT PRIMARY KEY,
        action TEXT NOT NULL,
        filter TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        reason TEXT,
        actor TEXT NOT NULL,
        via TEXT NOT NULL,
        created_at {real} NOT NULL,
        updated_at {real} NOT NULL,
        finished_at {real},
        total INTEGER NOT NULL DEFAULT 0,
        acted INTEGER NOT NULL DEFAULT 0,
        skipped INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE UNIQUE INDEX durably_bulk_jobs_unfinished ON durably_bulk_jobs (actor, fingerprint)"
    " WHERE finished_at IS NULL",
    "CREATE INDEX durably_bulk_jobs_by_time ON durably_bulk_jobs (created_at)",
    # The runs each job selected, and how it settled each (NULL: not yet): a run is marked
    # acted on in the transaction of the action's write (with its audit entry), once.
    """CREATE TABLE durably_bulk_runs (
        job TEXT NOT NULL,
        run_id TEXT NOT NULL,
        outcome TEXT,
        note TEXT,
        PRIMARY KEY (job, run_id)
    ){without_rowid}""",
    "CREATE INDEX durably_bulk_runs_pending ON durably_bulk_runs (job, run_id)"
    " WHERE outcome IS NULL",
    # Debounced starts (durably.core.debounce): the key a run gathers starts on, the latest it
    # may become due (its first start + max_wait), and how many starts it gathered.
    "ALTER TABLE durably_runs ADD COLUMN debounce TEXT",
    "ALTER TABLE durably_runs ADD COLUMN due_by {real}",
    "ALTER TABLE durably_runs ADD COLUMN gathered INTEGER",
    # At most one gathering run per workflow and key, whoever starts: the conflict target of a
    # debounced start's upsert. A run gathers until a worker first claims it: the claim raises
    # its lease epoch, which takes it out of this index without writing a column of its own
    # (claims stay as they were), and the next start of its key makes a new run.
    "CREATE UNIQUE INDEX durably_runs_gathering ON durably_runs (workflow, debounce)"
    " WHERE debounce IS NOT NULL AND lease_epoch = 0",
]

_V10 = [
    # What runs publish for callers (durably.core.outputs). The latest value of each event key
    # a run set (its history holds every set; this outlives continue_as_new, and a caller
    # reads or waits for a key by its primary key), written in the transaction of the
    # checkpoint that records the set.
    """CREATE TABLE durably_published_events (
        run_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        at {real} NOT NULL,
        PRIMARY KEY (run_id, key)
    ){without_rowid}""",
    # Streams: items in the order written (`item`: 0, 1, ... per run and key; value NULL: the
    # stream's end). `place` names the write (durably.core.outputs): the same place written
    # again (a replay, a step retried after a crash) is ignored, so no item is there twice.
    """CREATE TABLE durably_stream_items (
        run_id TEXT NOT NULL,
        key TEXT NOT NULL,
        item INTEGER NOT NULL,
        value TEXT,
        place TEXT NOT NULL,
        attempt INTEGER,
        at {real} NOT NULL,
        PRIMARY KEY (run_id, key, item)
    ){without_rowid}""",
    "CREATE UNIQUE INDEX durably_stream_places ON durably_stream_items (run_id, key, place)",
]

# Outbound webhooks (durably.core.webhooks). A subscription, and its kinds one row each (with
# its workflow filter), which the trigger below reads by kind.
_NOTICE_STATUSES = ", ".join(f"'{status}'" for status in KIND_OF_STATUS)
_KIND_OF_NEW = (
    "CASE NEW.status "
    + " ".join(f"WHEN '{status}' THEN '{kind}'" for status, kind in KIND_OF_STATUS.items())
    + " END"
)
# One delivery per subscription of the kind a run's new status is, inserted by a trigger in the
# transaction that changes the status, whatever the write (a worker's commit, one statement for
# a batch on PostgreSQL; a person's action; a bulk job): there exactly when the change is. The
# WHEN clause keeps it to changes to a status some kind stands for. With no webhook it must
# cost next to nothing, and a trigger that runs its insert (even one that reads an empty
# table) cost 8-12% of the store's claim-and-commit path (measured, both databases). So:
# PostgreSQL's function looks for a webhook first and returns (its call alone was within the
# measurement's noise); SQLite's trigger exists only while a webhook does (add_webhook makes
# it, the last remove drops it: SQLite has no privileges to stand in the way, and every
# connection sees a schema change at its next statement).
_NOTICE_INSERT = f"""INSERT INTO durably_deliveries (webhook, kind, run_id, workflow, status,
        queue, queue_key, correlation_id, at, state, attempts, due_at)
    SELECT k.webhook, k.kind, NEW.id, NEW.workflow, NEW.status, NEW.queue, NEW.queue_key,
        NEW.correlation_id, NEW.updated_at, 'due', 0, NEW.updated_at
    FROM durably_webhook_kinds AS k
    WHERE k.kind = {_KIND_OF_NEW} AND (k.workflow IS NULL OR k.workflow = NEW.workflow)"""
_NOTICE_WHEN = f"NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ({_NOTICE_STATUSES})"

SQLITE_NOTICES_TRIGGER = (
    "CREATE TRIGGER IF NOT EXISTS durably_runs_notices AFTER UPDATE OF status ON durably_runs"
    f" WHEN {_NOTICE_WHEN.replace('IS DISTINCT FROM', 'IS NOT')} BEGIN {_NOTICE_INSERT}; END"
)

# Made and dropped together by `durably changes on|off` (durably.stores.postgres.listen), by
# name: a status change an UPDATE makes, and a run inserted already running (a start that
# claims it for a worker of its process: durably.stores.postgres.starts), whose change to
# running no UPDATE makes. A run inserted pending is not a change.
CHANGES_TRIGGERS = {
    "durably_runs_changes": "CREATE TRIGGER durably_runs_changes AFTER UPDATE OF status"
    " ON durably_runs FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)"
    " EXECUTE FUNCTION durably_run_changed()",
    "durably_runs_started_running": "CREATE TRIGGER durably_runs_started_running AFTER INSERT"
    " ON durably_runs FOR EACH ROW WHEN (NEW.status = 'running')"
    " EXECUTE FUNCTION durably_run_changed()",
}

_V11: list[str | dict[str, str]] = [
    """CREATE TABLE durably_webhooks (
        id TEXT PRIMARY KEY,
        url TEXT NOT NULL,
        kinds TEXT NOT NULL,
        secret TEXT,
        workflow TEXT,
        attempts INTEGER NOT NULL,
        created_at {real} NOT NULL
    )""",
    """CREATE TABLE durably_webhook_kinds (
        kind TEXT NOT NULL,
        webhook TEXT NOT NULL,
        workflow TEXT,
        PRIMARY KEY (kind, webhook)
    ){without_rowid}""",
    # Deliveries: due (due_at: the next try, or the end of the lease of the worker sending it),
    # delivered, or dead (every attempt failed: the webhooks' dead-letter list).
    """CREATE TABLE durably_deliveries (
        id {identity},
        webhook TEXT NOT NULL,
        kind TEXT NOT NULL,
        run_id TEXT NOT NULL,
        workflow TEXT NOT NULL,
        status TEXT NOT NULL,
        queue TEXT,
        queue_key TEXT,
        correlation_id TEXT,
        at {real} NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        due_at {real},
        last_error TEXT,
        delivered_at {real}
    )""",
    "CREATE INDEX durably_deliveries_due ON durably_deliveries (due_at) WHERE state = 'due'",
    "CREATE INDEX durably_deliveries_by_webhook ON durably_deliveries (webhook, id)",
    "CREATE INDEX durably_deliveries_dead ON durably_deliveries (id) WHERE state = 'dead'",
    "CREATE INDEX durably_deliveries_by_run ON durably_deliveries (run_id)",  # pruning
    {  # SQLite's: SQLITE_NOTICES_TRIGGER, made with the first webhook
        "postgres": "CREATE FUNCTION durably_run_notices() RETURNS trigger LANGUAGE plpgsql"
        " SET search_path FROM CURRENT AS $$ BEGIN"
        " IF NOT EXISTS (SELECT 1 FROM durably_webhook_kinds) THEN RETURN NULL; END IF;"
        f" {_NOTICE_INSERT}; RETURN NULL; END $$",
    },
    {
        "postgres": "CREATE TRIGGER durably_runs_notices AFTER UPDATE OF status ON durably_runs"
        f" FOR EACH ROW WHEN ({_NOTICE_WHEN}) EXECUTE FUNCTION durably_run_notices()",
    },
    # PostgreSQL's change stream (durably listen): a NOTIFY per status change, sent at the
    # commit by a trigger that `durably changes on` makes. Off by default: a NOTIFY per change
    # cost 7% of the store's claim-and-commit path (measured). SQLite's is sent by the store's
    # own connections, while a process of the machine listens (durably.stores.sqlite).
    {
        "postgres": "CREATE FUNCTION durably_run_changed() RETURNS trigger LANGUAGE plpgsql"
        " AS $$ BEGIN PERFORM pg_notify('durably_changes', json_build_object('run', NEW.id,"
        " 'workflow', NEW.workflow, 'status', NEW.status, 'at', NEW.updated_at)::text);"
        " RETURN NULL; END $$",
    },
]

_V12 = [
    # Claims lead with what the worker serves (durably.stores.sql.due): one index range per
    # workflow and version it runs, each in claim order, so that due runs of a workflow or a
    # version no worker here serves are never read. Replaces the one index of every claimable
    # run in claim order, which a claim walked past such runs (19 ms a claim behind 100,000
    # of them), so that a checkpoint still updates one claim index, not two.
    "DROP INDEX durably_runs_claim_rank",
    f"CREATE INDEX durably_runs_claimable ON durably_runs (workflow, version, {CLAIM_RANK})"
    " WHERE available_at IS NOT NULL",
]

_V13 = [
    # Pages of `durably runs list --workflow W` and `--queue Q` (and the API's, the
    # dashboard's): each status's runs of the workflow, of the named queue, in time order, so
    # that a page reads its own runs however many others the store holds
    # (durably.stores.sql.reads). A checkpoint that changes a run's status changes updated_at,
    # so each index costs it an entry (a step that keeps its run running changes no indexed
    # column: durably.stores.sqlite.commit, durably.stores.postgres.commit); the default
    # queue's runs stay out of the second (it finds them in the status index).
    "CREATE INDEX durably_runs_by_workflow ON durably_runs (workflow, status, updated_at)",
    "CREATE INDEX durably_runs_by_queue ON durably_runs (queue, status, updated_at)"
    " WHERE queue IS NOT NULL",
]

# The birth of a run on PostgreSQL (durably.stores.postgres.partitions): the time its history is
# partitioned by. NULL `born`, every run made since V14, is its created_at; the runs of before
# V14 read 0 (the column's default when it was added, kept by PostgreSQL without writing a
# row), so their histories stay where they were: the legacy partition, of births below 1.
# Indexed as written here, by its text: what retention finds a partition's runs by.
BIRTH = "coalesce(born, created_at)"

_V14: list[str | dict[str, str]] = [
    # PostgreSQL partitions the history by the birth of its run: retention drops a partition
    # whose runs have all gone, instead of deleting its rows one by one. A run's events all
    # have its birth, so each run's history lives whole in one partition. SQLite: none of it.
    {"postgres": "ALTER TABLE durably_runs ADD COLUMN born DOUBLE PRECISION DEFAULT 0"},
    {"postgres": "ALTER TABLE durably_runs ALTER COLUMN born DROP DEFAULT"},
    {"postgres": f"CREATE INDEX durably_runs_born ON durably_runs (({BIRTH}))"},
    # The history so far becomes the legacy partition as it is: no row is rewritten and no
    # index built (its unique indexes are kept as that partition's own, see below). Adding
    # the check reads it once, under the migration's lock, so that attaching it does not.
    {"postgres": "ALTER TABLE durably_events RENAME TO durably_events_legacy"},
    {"postgres": "ALTER INDEX durably_events_pkey RENAME TO durably_events_legacy_pkey"},
    {
        "postgres": "ALTER INDEX durably_events_one_outcome"
        " RENAME TO durably_events_legacy_one_outcome"
    },
    {"postgres": "ALTER INDEX durably_events_patches RENAME TO durably_events_legacy_patches"},
    {
        "postgres": "ALTER TABLE durably_events_legacy"
        " ADD COLUMN born DOUBLE PRECISION NOT NULL DEFAULT 0"
        " CONSTRAINT durably_events_legacy_born CHECK (born = 0)"
    },
    # No primary key on the partitioned table: PostgreSQL would make it include the partition
    # key, and attaching the legacy partition would build that index over the whole history.
    # Each partition has its own unique (run_id, seq) and one outcome per step instead
    # (durably.stores.postgres.partitions makes them with it): a run's events are all in one
    # partition (one birth), so each is as unique per run as a table-wide index would make it.
    {
        "postgres": """CREATE TABLE durably_events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        position INTEGER,
        name TEXT,
        attempt INTEGER,
        data TEXT,
        at DOUBLE PRECISION NOT NULL,
        born DOUBLE PRECISION NOT NULL
    ) PARTITION BY RANGE (born)"""
    },
    {
        "postgres": "CREATE INDEX durably_events_patches ON durably_events (name, run_id)"
        " WHERE kind = 'patch_decided'"
    },
    {
        "postgres": "ALTER TABLE durably_events ATTACH PARTITION durably_events_legacy"
        " FOR VALUES FROM (MINVALUE) TO (1)"
    },
    # Events of a birth no partition holds (made late, or a clock far off): kept, and read,
    # all the same; pruned row by row, never dropped.
    {"postgres": "CREATE TABLE durably_events_default PARTITION OF durably_events DEFAULT"},
    {"postgres": "ALTER TABLE durably_events_default ADD PRIMARY KEY (run_id, seq)"},
    {
        "postgres": "CREATE UNIQUE INDEX durably_events_default_one_outcome"
        " ON durably_events_default (run_id, position) WHERE kind = 'step_completed'"
    },
]

_V15: list[str | dict[str, str]] = [
    # PostgreSQL keeps a run's `run_started` data beside its row (NULL: an event with none),
    # so that a run's first claim hands back its history, the run_started event alone,
    # without a second statement to read it from its partition (a claim of one: 1.35 -> 0.9
    # ms, measured). '' (the default): not kept here (a run made before V15, or by a write
    # that does not give it: a restart's new run); its history is read.
    # Adding a column with a constant default writes no row.
    {"postgres": "ALTER TABLE durably_runs ADD COLUMN started TEXT DEFAULT ''"},
]

_V16: list[str | dict[str, str]] = [
    # A start that claims its run inserts it running, in one statement (it inserted it pending
    # and leased it by an UPDATE: four round trips). Where the change stream is on, the
    # trigger that hears such a run is made beside the one that hears UPDATEs.
    {
        "postgres": "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_trigger"
        " WHERE tgname = 'durably_runs_changes' AND tgrelid = 'durably_runs'::regclass) THEN "
        + CHANGES_TRIGGERS["durably_runs_started_running"]
        + "; END IF; END $$"
    },
]

# A statement is the same on both databases (with the words of _DIALECTS), or a dict of each
# database's own (a database not in it has none).
_VERSIONS: list[Sequence[str | dict[str, str]]] = [
    _V1,
    _V2,
    _V3,
    _V4,
    _V5,
    _V6,
    _V7,
    _V8,
    _V9,
    _V10,
    _V11,
    _V12,
    _V13,
    _V14,
    _V15,
    _V16,
]
LATEST_VERSION = len(_VERSIONS)

_DIALECTS = {
    "sqlite": {
        "real": "REAL",
        "without_rowid": " WITHOUT ROWID",
        "identity": "INTEGER PRIMARY KEY AUTOINCREMENT",  # ids never reused: order is sending
    },
    "postgres": {
        "real": "DOUBLE PRECISION",
        "without_rowid": "",
        "identity": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    },
}


def migrations(dialect: str, current: int) -> list[tuple[int, list[str]]]:
    """The statements that bring a database at version `current` to the latest."""
    words = _DIALECTS[dialect]
    return [
        (
            version,
            [
                statement.format(**words) if isinstance(statement, str) else statement[dialect]
                for statement in statements
                if isinstance(statement, str) or dialect in statement
            ],
        )
        for version, statements in enumerate(_VERSIONS, start=1)
        if version > current
    ]
