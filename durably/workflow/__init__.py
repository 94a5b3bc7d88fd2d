"""Everything a workflow body calls (durable timers, signals, approvals, gather, children,
patches, deterministic time and randomness, heartbeats, escalation) and the context of the run
it is called in: the definitions the decorators return and the registry a worker runs from."""
