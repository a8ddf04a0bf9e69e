"""FaiError and libfai's status codes turned into it."""
from . import _lib


class FaiError(ValueError):
    """A bad argument, or a failing libfai call. The message is fai_last_error()'s (it names the
    field and the value) or the Python layer's own; `status` is the fai_status name
    ("FAI_ERR_INVALID_ARG", ...) for library errors and None for the Python layer's checks."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        self.status = status


def _fail(message):
    raise FaiError(message)


def _check(status):
    if status != _lib.FAI_OK:
        msg = _lib.last_error()
        name = _lib.STATUS_NAMES.get(status, "FAI_ERR_UNKNOWN")
        text = msg.decode("utf-8", "replace") if msg else ""
        raise FaiError(text or name, name)
