"""`python -m durably` is the `durably` command."""

from durably.cli import main

main()
