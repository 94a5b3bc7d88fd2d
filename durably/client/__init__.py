"""The one way in for every caller (App, the CLI, the HTTP API): the client and the actions
people and programs take with runs: start, wait, read pages, steer, decide approvals, handle
dead letters, restart and export."""
