"""``python -m chunkproof``: the command-line interface."""

from chunkproof.checker.cli.main import main

raise SystemExit(main())
