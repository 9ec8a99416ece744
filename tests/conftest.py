"""Shared fixtures."""

from __future__ import annotations

import pytest
from cli_helpers import Cli, CliRun

from chunkproof.checker.cli.main import main


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run ``chunkproof`` in-process; argparse's SystemExit becomes the exit status."""

    def run(*argv: str) -> CliRun:
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse errors and --help
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return CliRun(code, captured.out, captured.err)

    return run
