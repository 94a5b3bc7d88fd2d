"""The engine at work: executing runs, committing checkpoints, the worker loop."""
