"""Strict input: what the package takes for windows, lengths and series, and the errors for the
rest. One place judges every value (the extension's slow paths land here), so every call refuses
the same values with the same sentence.

Windows and lengths are whole numbers: Python ints, integer numpy values, or floats whose value is
a whole number (what np.round and np.linspace give), taken exactly; nothing is ever truncated.
Any other float (3.5, nan, inf), a bool, a str or a value past int64 is refused with
InvalidArgument naming the argument, the position and the value. numpy would turn `[True, 1]` into
ints and `[2**63, 1]` into floats, so sequences are judged element by element before they become
an array, and nesting deeper than a grid's two levels is refused before anything recurses into it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NewType, Sequence, Tuple, TypeGuard, Union, overload

import numpy as np
import numpy.typing as npt

from . import _ipcfloor
from ._errors import invalid

__all__ = ["Combo", "Windows", "Lengths", "SeriesKey", "SweepParams", "Grid", "is_int", "combo_from_length", "grid", "request",
           "six", "combos", "sweep_combos", "timeout_ns", "seconds", "TIMEOUT_MIN", "TIMEOUT_MAX"]

Combo = Tuple[int, int, int, int, int, int]
# What ipcfloor.grid returns: an (n, 6) int64 array, under a type of its own so that backtest and
# subscribe of it are typed (their overloads in _ipcfloor.pyi; an array whose type does not say
# its shape may hold one combo or many, and types as Any there). At run time a plain ndarray.
Grid = NewType("Grid", npt.NDArray[np.int64])
# Six windows, one length, or an (n, 6) grid: a Python int or sequence of them, or a numpy array
# or scalar of whole numbers.
Windows = Union[int, float, "np.integer[Any]", "np.floating[Any]", Sequence[int], Sequence[Sequence[int]],
                "npt.NDArray[np.integer[Any] | np.floating[Any]]"]
# Lengths: a sequence or 1-D array of whole numbers >= 1 (floats only when whole).
Lengths = Union[Sequence[float], "npt.NDArray[np.integer[Any] | np.floating[Any]]"]
SeriesKey = Union[int, "np.integer[Any]", str]
# What sweep takes: lengths (1-D) or an (n, 6) array of windows; never one length or one combo.
SweepParams = Union[Sequence[float], Sequence[Sequence[float]], "npt.NDArray[np.integer[Any] | np.floating[Any]]"]

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
# A grid of windows nests two levels (rows of six); nothing the package takes nests deeper.
MAX_NESTING = 2
# What a timeout in seconds may be: the CLI's `sweep --timeout` range, and the C ABI's
# IPCFLOOR_TIMEOUT_MAX_NS (one day).
TIMEOUT_MIN = 0.001
TIMEOUT_MAX = 86_400.0
_FORMS = "six windows [h, L, s, p3, p2, p], a length L, or an (n, 6) array of windows"
_WHOLE = ("windows and lengths are whole numbers: ints, or floats whose value is whole (np.round(x) gives them); "
          "nothing is truncated")


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """A Python int (not a bool) or a numpy integer scalar."""
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, np.integer)


def _is_float(value: object) -> TypeGuard[float | np.floating[Any]]:
    return isinstance(value, (float, np.floating))


def _kind(value: object) -> str:
    return f"a numpy {value.dtype}" if isinstance(value, np.generic) else f"a {type(value).__name__}"


def _where(index: tuple[int, ...]) -> str:
    return "".join(f"[{i}]" for i in index)


def _whole(value: float) -> bool:
    """A float whose value is a whole number within int64 (taken exactly)."""
    return math.isfinite(value) and value == math.floor(value) and INT64_MIN <= value < 2.0 ** 63


def _bad_value(fn: str, arg: str, index: tuple[int, ...], value: object) -> Exception:
    if is_int(value) or (_is_float(value) and math.isfinite(float(value)) and float(value) == math.floor(
            float(value))):
        shown = int(value) if is_int(value) else repr(value)
        return invalid(f"{fn}: {arg}{_where(index)} is {shown}, past int64 (windows are integers in "
                       f"[-2**63, 2**63 - 1], and the engine takes [1, bars])")
    if _is_float(value):
        return invalid(f"{fn}: {arg}{_where(index)} is {value!r}, {_kind(value)} that is not a whole number: {_WHOLE} "
                       f"(round it first, e.g. np.round(x), or build lengths with ipcfloor.grid(first, last, count))")
    return invalid(f"{fn}: {arg}{_where(index)} is {value!r}, {_kind(value)}: {_WHOLE}")


def _check_leaves(fn: str, arg: str, value: object, index: tuple[int, ...]) -> None:
    """Every leaf of a nested list/tuple is a whole number within int64 (numpy arrays inside are
    judged as arrays); more than MAX_NESTING levels are refused before they are walked."""
    if isinstance(value, (list, tuple)):
        if len(index) >= MAX_NESTING:
            raise invalid(f"{fn}: {arg}{_where(index)} is a {type(value).__name__} nested {len(index) + 1} levels "
                          f"deep: give {_FORMS} (at most {MAX_NESTING} levels)")
        for i, item in enumerate(value):
            _check_leaves(fn, arg, item, index + (i,))
    elif isinstance(value, np.ndarray):
        if len(index) + value.ndim > MAX_NESTING:
            raise invalid(f"{fn}: {arg}{_where(index)} is a {value.ndim}-D array inside {len(index)} level(s) of "
                          f"lists: give {_FORMS} (at most {MAX_NESTING} levels)")
        _check_array(fn, arg, value, index)
    elif is_int(value):
        if not INT64_MIN <= int(value) <= INT64_MAX:
            raise _bad_value(fn, arg, index, value)
    elif not (_is_float(value) and _whole(float(value))):
        raise _bad_value(fn, arg, index, value)


def _check_array(fn: str, arg: str, array: npt.NDArray[Any], prefix: tuple[int, ...] = ()) -> None:
    """An array whose every value is a whole number within int64; else the error names the first
    that is not."""
    kind = array.dtype.kind
    if kind == "i":
        return
    if kind == "u":
        past = np.argwhere(array > INT64_MAX)
        if past.size:
            at = tuple(int(i) for i in past[0])
            raise _bad_value(fn, arg, prefix + at, int(array[at]))
        return
    if kind == "f":
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(array) & (array == np.floor(array)) & (array >= INT64_MIN) & (array < 2.0 ** 63)
        bad = np.argwhere(~whole)
        if bad.size:
            at = tuple(int(i) for i in bad[0])
            raise _bad_value(fn, arg, prefix + at, array[at])
        return
    if kind == "O":
        if len(prefix) + array.ndim > MAX_NESTING:
            raise invalid(f"{fn}: {arg} is an object array of {array.ndim} dimensions: give {_FORMS}")
        for at in np.ndindex(array.shape):
            _check_leaves(fn, arg, array[at], prefix + tuple(at))
        return
    if array.size == 0:
        raise invalid(f"{fn}: {arg} is an empty {array.dtype} array: {_WHOLE}")
    first = tuple(0 for _ in array.shape)
    raise _bad_value(fn, arg, prefix + first, array[first])


def int64_array(fn: str, arg: str, value: object) -> npt.NDArray[np.int64]:
    """`value` as a C-contiguous int64 array, if it holds only whole numbers within int64."""
    if isinstance(value, np.ndarray):
        _check_array(fn, arg, value)
        array = np.asarray(value, dtype=np.int64)  # keeps a 0-d array 0-d (a length); floats are whole
        return array if array.flags.c_contiguous else np.ascontiguousarray(array)
    if is_int(value) or _is_float(value):
        _check_leaves(fn, arg, value, ())
        return np.array(int(value) if is_int(value) else int(float(value)), dtype=np.int64)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise invalid(f"{fn}: {arg} is {value!r}, {_kind(value)}: give {_FORMS}")
    items = value if isinstance(value, (list, tuple)) else list(value)  # a range, a generator, ...
    _check_leaves(fn, arg, items, ())
    try:
        return np.array(items, dtype=np.int64)
    except ValueError:
        raise invalid(f"{fn}: {arg} is ragged ({value!r}): give {_FORMS}") from None


def _whole_number(fn: str, arg: str, value: object, what: str) -> int:
    """An int, or a float whose value is whole, as an int; else InvalidArgument naming `what`."""
    if is_int(value):
        return int(value)
    if _is_float(value) and _whole(float(value)):
        return int(float(value))
    raise invalid(f"{fn}: {arg} is {value!r}, {_kind(value)}: {what}")


def _length(fn: str, arg: str, value: object) -> int:
    """A length L: a whole number in [1, 2**63)."""
    length = _whole_number(fn, arg, value, "a length is a whole number >= 1 (an int, or a float whose value is whole)")
    if not 1 <= length <= INT64_MAX:
        raise invalid(f"{fn}: {arg} is {length}: a length is a whole number >= 1 (and at most 2**63 - 1)")
    return length


def combo_from_length(length: int | float | np.integer[Any] | np.floating[Any]) -> Combo:
    """The six windows users derive from one length L, by the C library's rule (docs/SPEC.md):
    round half to even, each at least 1: h = p = round(L/2), s = round(sqrt(L)), p3 = round(p/3),
    p2 = round(p/2). L is a whole number in [1, 2**63)."""
    return _ipcfloor.combo_from_length(_length("combo_from_length", "length", length))


def _grid_of(fn: str, array: npt.NDArray[np.int64]) -> Grid:
    """The (n, 6) combos of a 1-D int64 array of lengths, each >= 1."""
    for i, length in enumerate(array.tolist()):
        if length < 1:
            raise invalid(f"{fn}: lengths[{i}] is {length}: a length is a whole number >= 1")
    out = np.empty((array.size, 6), dtype=np.int64)
    for i, length in enumerate(array.tolist()):
        out[i] = _ipcfloor.combo_from_length(length)
    return Grid(out)


def _linspace_lengths(first: object, last: object, count: object) -> npt.NDArray[np.int64]:
    """round(linspace(first, last, count)), half to even, exactly as `ipcfloor sweep --grid
    FIRST:LAST:COUNT` computes it: first + i * step, the last point set to `last`."""
    where = f"grid({first!r}, {last!r}, {count!r})"
    bounds = []
    for arg, value in (("first", first), ("last", last)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or \
                not math.isfinite(float(value)):
            raise invalid(f"{where}: {arg} is {value!r}: give a finite number (as --grid FIRST:LAST:COUNT takes)")
        bounds.append(float(value))
    n = _whole_number("grid", "count", count, "give a whole number of lengths, 1 to 100000")
    low, high = bounds
    if not (1 <= low <= high < 2.0 ** 63 and 1 <= n <= 100_000):
        raise invalid(f"{where}: needs 1 <= first <= last and 1 <= count <= 100000 (as --grid FIRST:LAST:COUNT)")
    if n == 1:
        return np.array([np.rint(low)], dtype=np.int64)
    step = (high - low) / float(n - 1)
    values: npt.NDArray[np.float64] = low + np.arange(n, dtype=np.float64) * step
    values[-1] = high
    return np.rint(values).astype(np.int64)


@overload
def grid(lengths: Lengths, last: None = None, count: None = None) -> Grid: ...
@overload
def grid(lengths: float, last: float, count: int) -> Grid: ...
def grid(lengths: object, last: object = None, count: object = None) -> Grid:
    """An (n, 6) int64 array of combos for user-facing lengths, as the engine's CLI builds them:
    grid(lengths), a sequence or 1-D array of whole numbers >= 1 (ints, or floats whose value is
    whole: np.round(np.linspace(6, 200, 80)) is taken as is), or grid(first, last, count), the
    lengths of `ipcfloor sweep --grid FIRST:LAST:COUNT`: round(linspace(first, last, count)),
    half to even, computed as the CLI does."""
    if last is not None or count is not None:
        if last is None or count is None:
            raise invalid(f"grid: give grid(lengths) or grid(first, last, count), not grid({lengths!r}, {last!r}, "
                          f"{count!r})")
        return _grid_of("grid", _linspace_lengths(lengths, last, count))
    array = int64_array("grid", "lengths", lengths)
    if array.ndim != 1:
        raise invalid(f"grid: lengths has shape {array.shape}: give a sequence or 1-D array of lengths, or "
                      f"grid(first, last, count)")
    return _grid_of("grid", array)


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


def sweep_combos(fn: str, value: object) -> npt.NDArray[np.int64]:
    """What sweep takes: lengths (a sequence or 1-D array: their combos, as grid makes them) or an
    (n, 6) array of windows, as a C-contiguous int64 (n, 6) array."""
    array = int64_array(fn, "params", value)
    if array.ndim == 1:
        return _grid_of(fn, array)
    if array.ndim == 2 and array.shape[1] == 6:
        return array
    if array.ndim == 0:
        raise invalid(f"{fn}: params is one length ({int(array)}): give a list of lengths ([{int(array)}]) or an "
                      f"(n, 6) array of windows; backtest({int(array)}) runs one")
    raise invalid(f"{fn}: params has shape {array.shape}: give lengths (a sequence or 1-D array) or an (n, 6) array "
                  f"of windows [h, L, s, p3, p2, p]")


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


def seconds(fn: str, value: object, what: str = "timeout") -> float:
    """A timeout (or another bound, `what`) in seconds: a number in [TIMEOUT_MIN, TIMEOUT_MAX] (1 ms
    to one day, the CLI's `sweep --timeout` range)."""
    if isinstance(value, bool) or not isinstance(value, (float, int, np.floating, np.integer)) or \
            not math.isfinite(float(value)) or not TIMEOUT_MIN <= float(value) <= TIMEOUT_MAX:
        raise invalid(f"{fn}: {what} is {value!r}: a {what} is a number of seconds from {TIMEOUT_MIN} (1 ms) to "
                      f"{TIMEOUT_MAX:.0f} (one day)")
    return float(value)


def timeout_ns(value: object) -> int:
    """attach's timeout (seconds, see seconds) in nanoseconds."""
    return round(seconds("attach", value) * 1e9)
