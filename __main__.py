"""``python -m chunkproof``: the command-line interface."""

from chunkproof.checker.cli import main

raise SystemExit(main())
