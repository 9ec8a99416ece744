"""Errors the tool reports to its user as one line, with the exit code of the CLI contract."""

EXIT_OK = 0
EXIT_VIOLATED = 1
EXIT_BAD_INPUT = 2
EXIT_UNKNOWN = 3


class ChunkproofError(Exception):
    """A user-facing error: printed as one line, never as a traceback."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(ChunkproofError):
    """A configuration outside the model's domain (SPEC S1): a zero block size, L > T, ..."""


class SubsetError(ChunkproofError):
    """Policy source outside the documented subset; the message names file and line."""


class PolicyError(ChunkproofError):
    """An unknown policy name or an unloadable policy."""


class PolicyCrash(Exception):
    """Policy code raised (SPEC P0: a failed ``assert``, a ``raise``, a division by zero) in its
    concrete form; ``args[0]`` says where. Not a user-facing error: engines record it as a
    violation of P0."""
