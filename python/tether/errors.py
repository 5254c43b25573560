"""Exceptions: one class per stable error code of the process API
(include/tether/errors.h), all under TetherError. `code` is the code's name
("OUTCOME_UNKNOWN", ...), the message says what happened."""

from __future__ import annotations


class TetherError(Exception):
    """A failed call; `code` is its stable name, str(e) the message."""

    code: str = "INTERNAL"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgument(TetherError, ValueError):
    """Rejected before any effect."""
    code = "INVALID_ARGUMENT"


class Unsupported(TetherError):
    """Not available for this process or provider."""
    code = "UNSUPPORTED"


class Unavailable(TetherError, ConnectionError):
    """The connection failed; nothing is guessed."""
    code = "UNAVAILABLE"


class Busy(Unavailable):
    """Another attachment holds the process."""
    code = "BUSY"


class Expired(TetherError):
    """A reference past its lifetime."""
    code = "EXPIRED"


class InputClosed(TetherError):
    """stdin closed, never a pipe, or the handle disconnected."""
    code = "INPUT_CLOSED"


class OutcomeUnknown(TetherError):
    """Dispatched, but whether it took effect is unknown."""
    code = "OUTCOME_UNKNOWN"


class NotFound(TetherError, LookupError):
    """Executable, cwd or process not found."""
    code = "NOT_FOUND"


class PermissionDenied(TetherError, PermissionError):
    """Not executable, or not allowed."""
    code = "PERMISSION_DENIED"


class ProtocolError(TetherError):
    """The peer broke the protocol."""
    code = "PROTOCOL"


class LaunchCancelled(TetherError):
    """A launch stopped by its cancellation marker."""
    code = "CANCELLED"


class OutputCapacity(TetherError):
    """Output observation stopped (finite cap or unread limit); everything
    before it was delivered."""
    code = "OUTPUT_CAPACITY"


class WaitAborted(TetherError):
    """The caller aborted this call."""
    code = "WAIT_ABORTED"


class ResourceExhausted(TetherError):
    """A local limit (the input queue) is full; retry after earlier calls."""
    code = "RESOURCE_EXHAUSTED"


class InternalError(TetherError):
    """A failure that has no public code."""
    code = "INTERNAL"


# In the order of enum tether_error (1..15).
_BY_NUMBER = [None, InvalidArgument, Unsupported, Unavailable, Busy, Expired, InputClosed, OutcomeUnknown,
              NotFound, PermissionDenied, ProtocolError, LaunchCancelled, OutputCapacity, WaitAborted,
              ResourceExhausted, InternalError]


def from_code(number: int, message: str) -> TetherError:
    """The exception for C error `number` with `message`."""
    cls = _BY_NUMBER[number] if 0 < number < len(_BY_NUMBER) else InternalError
    return cls(message or cls.code)
