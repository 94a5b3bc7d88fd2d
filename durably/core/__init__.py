"""The pure core: run states, history events and replay decisions. No I/O, no clock, no threads."""
