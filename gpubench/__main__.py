"""`python -m gpubench` runs the command-line interface."""

from gpubench.cli import main

raise SystemExit(main())
