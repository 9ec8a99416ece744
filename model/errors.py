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


class ValueTooLarge(ChunkproofError):
    """An intermediate integer of a policy grew past what the tool evaluates exactly
    (:data:`MAX_BITS` in every form, and the int64 range inside the vectorised form's arrays)."""


MAX_BITS = 256
"""Largest integer (in bits) a policy may compute, in every form: the concrete and symbolic
forms' plain integers and the vectorised form's scalars (its array lanes stop at 2^62)."""


def bounded(value: object) -> object:
    """``value`` itself, or :class:`ValueTooLarge` when it is a plain integer of more than
    :data:`MAX_BITS` bits (hostile arithmetic fails fast instead of running for minutes)."""
    if isinstance(value, int) and value.bit_length() > MAX_BITS:
        raise ValueTooLarge(f"an intermediate integer exceeds {MAX_BITS} bits")
    return value


class PolicyCrash(Exception):
    """Policy code raised (SPEC P0: a failed ``assert``, a ``raise``, a division by zero) in its
    concrete form; ``args[0]`` says where. Not a user-facing error: engines record it as a
    violation of P0."""
