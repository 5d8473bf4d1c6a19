"""`python -m astuner` is the `astuner` command."""

from astuner.cli import main

main()
