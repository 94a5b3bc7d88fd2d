"""The SQL both stores share: the schema, rows to records, reads, the inbox, effects of a
checkpoint, pruning, stats. Written once in the dialect both databases speak; what differs
lives in stores/sqlite/ and stores/postgres/."""
