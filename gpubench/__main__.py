"""`python -m gpubench` runs the command-line interface."""

import sys

try:
    from gpubench.cli import main
except KeyboardInterrupt:  # Ctrl-C while the modules load: one line, no traceback
    print("gpubench: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
