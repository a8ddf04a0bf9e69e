"""Scalar arguments taken strictly: a flag only as True or False, an integer only as an integer
within the range its C field holds, a number only as a real number. Anything else is refused by
the value the caller gave, never read by its truthiness, wrapped at a C integer's width or parsed
from a string."""
import math
import numbers

import numpy as np

from ._errors import _fail

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
INT_MIN, INT_MAX = -2**31, 2**31 - 1  # a C int
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_TINY = float(np.finfo(np.float32).smallest_subnormal)


def _flag(value, name):
    """A boolean option as 1 or 0: True or False (numpy's bool_ too), nothing else."""
    if isinstance(value, (bool, np.bool_)):
        return int(bool(value))
    _fail(f"{name} = {value!r}: expected True or False")


def _is_integer(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _integer(value, name, low=INT64_MIN, high=INT64_MAX, note=""):
    """An integer option as a Python int in [low, high] (the C field's range unless the option
    documents a narrower one); floats, strings and bools are refused. note: what the message adds
    after the range (defaults, special values)."""
    if _is_integer(value) and low <= int(value) <= high:
        return int(value)
    _fail(f"{name} = {value!r}: expected an integer from {low} to {high}{note}")


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _real(value, name, expected):
    """A real number (a Python or numpy int or float, not a bool, complex or string) as a Python
    float; expected: what the message asks for instead."""
    if not _is_real(value):
        _fail(f"{name} = {value!r}: expected {expected}")
    try:
        return float(value)
    except OverflowError:  # an int past float64's range
        _fail_float32(name, value)


def _fail_float32(label, value, rounds_to_zero=False):
    """Refuses value of label (a field, or an element of one) that float32 cannot hold."""
    if rounds_to_zero:
        _fail(f"{label} = {value!r} is nonzero but rounds to 0 in float32 (the smallest nonzero "
              f"float32 is {_FLOAT32_TINY:.4g})")
    _fail(f"{label} = {value!r} is outside float32's range (it would become inf; the largest "
          f"float32 is {_FLOAT32_MAX:.7g})")


def _float32_scalar(value, name, expected, nonzero=False):
    """A real number that becomes a float32 as a Python float: a finite value that float32 turns
    into inf is refused, and with nonzero (scales, soft caps) a nonzero one it turns into 0.
    nan and inf pass through as given: the library names them."""
    x = _real(value, name, expected)
    with np.errstate(over="ignore", under="ignore"):
        f = float(np.float32(x))
    if math.isfinite(x) and not math.isfinite(f):
        _fail_float32(name, value)
    if nonzero and x != 0 and f == 0:
        _fail_float32(name, value, rounds_to_zero=True)
    return f
