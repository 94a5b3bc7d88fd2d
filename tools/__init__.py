"""Tools for the project itself, not shipped in the wheel."""
