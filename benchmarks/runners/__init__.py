"""Engine runners: durably in the harness's process (inprocess), or an engine's runner module
in a process of its own per measurement (processes; the protocol is in protocol.py).

This package imports nothing: `python -m` imports it before a runner's cold-start clock starts.
"""
