"""Strict input: what the package takes for windows, lengths and series, and the errors for the
rest. One place judges every value (the extension's slow paths land here), so every call refuses
the same values with the same sentence.

Windows are Python ints or integer numpy values only: a float, a bool, a str or a value past
int64 is refused with InvalidArgument naming the argument, the position and the value. numpy
would turn `[True, 1]` into ints and `[2**63, 1]` into floats, so sequences are judged element by
element before they become an array.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Sequence, Tuple, TypeGuard, Union

import numpy as np
import numpy.typing as npt

from . import _ipcfloor
from ._errors import invalid

__all__ = ["Combo", "Windows", "Lengths", "SeriesKey", "is_int", "combo_from_length", "grid", "request", "six",
           "combos"]

Combo = Tuple[int, int, int, int, int, int]
# Six windows, one length, or an (n, 6) grid: a Python int or sequence of them, or an integer
# numpy array or scalar.
Windows = Union[int, "np.integer[Any]", Sequence[int], Sequence[Sequence[int]], "npt.NDArray[np.integer[Any]]"]
Lengths = Union[Sequence[int], "npt.NDArray[np.integer[Any]]"]
SeriesKey = Union[int, "np.integer[Any]", str]

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
_FORMS = "six windows [h, L, s, p3, p2, p], a length L, or an (n, 6) array of windows"


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """A Python int (not a bool) or a numpy integer scalar."""
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, np.integer)


def _kind(value: object) -> str:
    return f"a numpy {value.dtype}" if isinstance(value, np.generic) else f"a {type(value).__name__}"


def _where(index: tuple[int, ...]) -> str:
    return "".join(f"[{i}]" for i in index)


def _bad_value(fn: str, arg: str, index: tuple[int, ...], value: object) -> Exception:
    if is_int(value):
        return invalid(f"{fn}: {arg}{_where(index)} is {int(value)}, past int64 (windows are integers in "
                       f"[-2**63, 2**63 - 1], and the engine takes [1, bars])")
    return invalid(f"{fn}: {arg}{_where(index)} is {value!r}, {_kind(value)}: windows are Python ints or integer "
                   f"numpy arrays only")


def _check_leaves(fn: str, arg: str, value: object, index: tuple[int, ...]) -> None:
    """Every leaf of a nested list/tuple is an int within int64 (numpy arrays inside are judged
    as arrays)."""
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_leaves(fn, arg, item, index + (i,))
    elif isinstance(value, np.ndarray):
        _check_array(fn, arg, value, index)
    elif not is_int(value) or not INT64_MIN <= int(value) <= INT64_MAX:
        raise _bad_value(fn, arg, index, value)


def _check_array(fn: str, arg: str, array: npt.NDArray[Any], prefix: tuple[int, ...] = ()) -> None:
    """An integer array whose every value fits int64; else the error names the first that does not."""
    kind = array.dtype.kind
    if kind == "i":
        return
    if kind == "u":
        past = np.argwhere(array > INT64_MAX)
        if past.size:
            at = tuple(int(i) for i in past[0])
            raise _bad_value(fn, arg, prefix + at, int(array[at]))
        return
    if kind == "O":
        for at in np.ndindex(array.shape):
            _check_leaves(fn, arg, array[at], prefix + tuple(at))
        return
    if array.size == 0:
        raise invalid(f"{fn}: {arg} is an empty {array.dtype} array: windows are Python ints or integer numpy arrays "
                      f"only")
    first = tuple(0 for _ in array.shape)
    raise _bad_value(fn, arg, prefix + first, array[first])


def int64_array(fn: str, arg: str, value: object) -> npt.NDArray[np.int64]:
    """`value` as a C-contiguous int64 array, if it holds only integers within int64."""
    if isinstance(value, np.ndarray):
        _check_array(fn, arg, value)
        array = np.asarray(value, dtype=np.int64)  # keeps a 0-d array 0-d (a length)
        return array if array.flags.c_contiguous else np.ascontiguousarray(array)
    if is_int(value):
        _check_leaves(fn, arg, value, ())
        return np.array(int(value), dtype=np.int64)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise invalid(f"{fn}: {arg} is {value!r}, {_kind(value)}: give {_FORMS}")
    items = value if isinstance(value, (list, tuple)) else list(value)  # a range, a generator, ...
    _check_leaves(fn, arg, items, ())
    try:
        return np.array(items, dtype=np.int64)
    except ValueError:
        raise invalid(f"{fn}: {arg} is ragged ({value!r}): give {_FORMS}") from None


def _length(fn: str, arg: str, value: object) -> int:
    """A length L: an int in [1, 2**63)."""
    if not is_int(value):
        raise invalid(f"{fn}: {arg} is {value!r}, {_kind(value)}: a length is a whole number >= 1 (a Python int or a "
                      f"numpy integer)")
    length = int(value)
    if not 1 <= length <= INT64_MAX:
        raise invalid(f"{fn}: {arg} is {length}: a length is a whole number >= 1 (and at most 2**63 - 1)")
    return length


def combo_from_length(length: int | np.integer[Any]) -> Combo:
    """The six windows users derive from one length L, by the C library's rule (docs/SPEC.md):
    round half to even, each at least 1: h = p = round(L/2), s = round(sqrt(L)), p3 = round(p/3),
    p2 = round(p/2). L is an int in [1, 2**63)."""
    return _ipcfloor.combo_from_length(_length("combo_from_length", "length", length))


def grid(lengths: Lengths) -> npt.NDArray[np.int64]:
    """An (n, 6) int64 array of combos for user-facing lengths, as the engine's CLI builds them.
    `lengths`: a sequence or 1-D integer array of whole numbers >= 1."""
    array = int64_array("grid", "lengths", lengths)
    if array.ndim != 1:
        raise invalid(f"grid: lengths has shape {array.shape}: give a sequence or 1-D array of lengths")
    for i, length in enumerate(array.tolist()):
        if length < 1:
            raise invalid(f"grid: lengths[{i}] is {length}: a length is a whole number >= 1")
    out = np.empty((array.size, 6), dtype=np.int64)
    for i, length in enumerate(array.tolist()):
        out[i] = _ipcfloor.combo_from_length(length)
    return out


def _combo(array: npt.NDArray[np.int64]) -> Combo:
    h, length, s, p3, p2, p = (int(v) for v in array.tolist())
    return h, length, s, p3, p2, p


def request(fn: str, value: object) -> Combo | npt.NDArray[np.int64]:
    """What backtest and subscribe take: a length L (its combo), six windows (a tuple of six ints)
    or an (n, 6) array (C-contiguous int64)."""
    if is_int(value):
        return combo_from_length(_length(fn, "params (a length)", value))
    array = int64_array(fn, "params", value)
    if array.ndim == 0:
        return combo_from_length(_length(fn, "params (a length)", int(array)))
    if array.shape == (6,):
        return _combo(array)
    if array.ndim == 2 and array.shape[1] == 6:
        return array
    raise invalid(f"{fn}: params has shape {array.shape}: give {_FORMS}")


def six(fn: str, value: object) -> Combo:
    """Six int64 values (echo's payload)."""
    array = int64_array(fn, "params", value)
    if array.shape != (6,):
        raise invalid(f"{fn}: params has shape {array.shape}: give six ints")
    return _combo(array)


def combos(fn: str, value: object) -> npt.NDArray[np.int64]:
    """An (n, 6) grid of windows as a C-contiguous int64 array."""
    array = int64_array(fn, "params", value)
    if array.ndim != 2 or array.shape[1] != 6:
        raise invalid(f"{fn}: params has shape {array.shape}: give an (n, 6) array of windows [h, L, s, p3, p2, p] "
                      f"(ipcfloor.grid(lengths) builds one)")
    return array


def close_price(fn: str, value: object) -> float:
    """A close: a Python or numpy float or int (not a bool); the engine judges its value."""
    if isinstance(value, bool) or not isinstance(value, (float, int, np.floating, np.integer)):
        raise invalid(f"{fn}: close is {value!r}, {_kind(value)}: a close is a float")
    return float(value)


def tick(fn: str, value: object) -> int:
    """A tick: an int in [0, 2**64)."""
    if not is_int(value) or not 0 <= int(value) < 1 << 64:
        raise invalid(f"{fn}: tick is {value!r}: a tick is a whole number in [0, 2**64)")
    return int(value)


def timeout_ns(value: object) -> int:
    """attach's timeout, seconds (a positive finite number), in nanoseconds."""
    if isinstance(value, bool) or not isinstance(value, (float, int, np.floating, np.integer)) or \
            not math.isfinite(float(value)) or not 0 < float(value) <= 1e9:
        raise invalid(f"attach: timeout is {value!r}: a timeout is a number of seconds in (0, 1e9]")
    return max(1, int(float(value) * 1e9))
