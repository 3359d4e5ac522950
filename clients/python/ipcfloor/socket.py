"""ipcfloor.socket: a small Python client for the ipcfloor socket protocol.

Written from docs/PROTOCOL.md with nothing but ``socket``, ``struct`` and numpy, so that it doubles
as a check that the document is enough to talk to the engine. Every value on the wire is
little-endian. It does not use the package's compiled extension or the segment: any host that
reaches the socket can run it.

    from ipcfloor.socket import SocketClient
    with SocketClient.unix("/tmp/ipcfloor.sock") as engine:
        series = engine.use_preloaded()                  # opcode 5: the server's own series ...
        pnl, trades = engine.sweep_loaded(params)        # opcode 3: ... then combos only
        pnl, trades = engine.sweep(close, params)        # opcode 0: ship everything
        checksum, fee = engine.load(close)               # opcode 2: ship a series once

``close`` is a 1-D array of floats, ``params`` an (n, 6) array of windows [h, L, s, p3, p2, p]
(see ``combo_from_length``) or, for the sweeps, lengths (a sequence or 1-D array, as
ipcfloor.grid takes them); windows are judged as the rest of the package judges them (whole
numbers within int64, never truncated). Every exception is an ipcfloor.Error: a value of the
wrong type or shape raises InvalidArgument before anything is sent; an error reply raises
``ServerError`` with the server's code and sentence; a connection that broke (closed, timed out,
malformed reply) raises ``ProtocolError``; a connect that finds nothing listening raises
NoEngine (PermissionDenied, Timeout: as the cause says). Timeouts are seconds from 0.001 to 86400.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Any, NamedTuple, NoReturn

import numpy as np
import numpy.typing as npt

from . import _input, _ipcfloor
from ._errors import Error, NoEngine, PermissionDenied, Timeout, invalid
from ._input import combo_from_length

__all__ = ["SocketClient", "ServerSeries", "ServerError", "ProtocolError", "build_request", "combo_from_length",
           "OP_SWEEP", "OP_ECHO", "OP_LOAD", "OP_SWEEP_LOADED", "OP_ECHO_PARAMS", "OP_USE_PRELOADED", "ERROR_NAMES",
           "FATAL_ERRORS"]

OP_SWEEP = 0
OP_ECHO = 1
OP_LOAD = 2
OP_SWEEP_LOADED = 3
OP_ECHO_PARAMS = 4
OP_USE_PRELOADED = 5

ERROR_MARKER = 0xFFFFFFFF
MAX_ERROR_MESSAGE = 1024
ERROR_NAMES = {
    1: "frame_too_large",
    2: "length_mismatch",
    3: "unknown_opcode",
    4: "window_out_of_range",
    5: "bad_price",
    6: "no_series_loaded",
    7: "bad_shape",
    8: "truncated",
    9: "stalled",
    10: "permission_denied",
    11: "too_many_connections",
    12: "internal",
    13: "no_preloaded_series",
    14: "idle_timeout",
    15: "over_memory_cap",
    16: "too_costly",
}
# After these the server closes the connection.
FATAL_ERRORS = {1, 8, 9, 10, 11, 14}

_HEADER = struct.Struct("<BII")  # opcode, n_bars, n_combos
_U32 = struct.Struct("<I")
_ONE_COMBO = struct.Struct("<IBII6q")  # a whole sweep_loaded request of one combo
_ONE_RESULT = struct.Struct("<Idq")  # its whole success reply: len 16, pnl, trades
_PRELOADED = struct.Struct("<QdQI")  # checksum, fee, n_bars, name_len

# What use_preloaded answers: the server's series, which sweep_loaded then runs on.
class ServerSeries(NamedTuple):
    name: str
    bars: int
    checksum: int
    fee: float


_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]


class ServerError(Error):
    """The server refused a request with an error reply. An ipcfloor.Error whose `code` is the
    socket protocol's error code (docs/PROTOCOL.md; `name` names it) and `message` the server's
    sentence; str() says which server and opcode too."""

    name: str

    def __init__(self, server: str, opcode: int | None, code: int, message: str) -> None:
        name = ERROR_NAMES.get(code, "unknown")
        super().__init__(code, f"{server} rejected opcode {opcode}: {name} (error {code}): {message}")
        self.name = name
        self.message = message
        self._args = (server, opcode, code, message)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), self._args


class ProtocolError(Error):
    """The connection is unusable: closed, timed out, or a reply broke the protocol (code
    IPCFLOOR_E_IO)."""

    def __init__(self, message: str) -> None:
        super().__init__(_ipcfloor.E_IO, message)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.message,)


def _closes(fn: str, close: object) -> npt.NDArray[np.float64]:
    """A series to send: a 1-D array of floats (the server judges the values: bad_price)."""
    try:
        bars = np.ascontiguousarray(close, dtype="<f8")
    except (TypeError, ValueError) as error:
        raise invalid(f"{fn}: close is not an array of numbers ({error}): give a 1-D array of floats") from None
    if bars.ndim != 1:
        raise invalid(f"{fn}: close has shape {bars.shape}: give a 1-D array of floats (one series)")
    return bars


def _windows(fn: str, params: object) -> npt.NDArray[np.int64]:
    """An (n, 6) array of windows, judged as the package judges them (never truncated)."""
    array = _input.int64_array(fn, "params", params)
    if array.ndim != 2 or array.shape[1] != 6:
        raise invalid(f"{fn}: params has shape {array.shape}: give an (n, 6) array of windows [h, L, s, p3, p2, p]")
    return array


def build_request(opcode: int, close: npt.ArrayLike | None = None, params: npt.ArrayLike | None = None) -> bytes:
    """One request frame: [u32 body_len][u8 opcode][u32 n_bars][u32 n_combos][close][params]."""
    if isinstance(opcode, bool) or not isinstance(opcode, int) or not 0 <= opcode <= 255:
        raise invalid(f"build_request: opcode is {opcode!r}: an opcode is an int in [0, 255] (docs/PROTOCOL.md)")
    bars = _closes("build_request", close if close is not None else [])
    combos = _windows("build_request", params) if params is not None else np.empty((0, 6), dtype=np.int64)
    body = _HEADER.pack(opcode, bars.size, combos.shape[0]) + bars.tobytes() + combos.astype("<i8").tobytes()
    return _U32.pack(len(body)) + body


def _connect_failed(server: str, error: OSError) -> Error:
    """The ipcfloor.Error for a connect that failed: nothing listening, not ours, too slow, or
    another system error."""
    if isinstance(error, (FileNotFoundError, ConnectionRefusedError)):
        return NoEngine(_ipcfloor.E_NO_ENGINE, f"nothing listens at {server} ({error.strerror or error}): is "
                                               f"`ipcfloor serve --socket PATH` or `--tcp HOST:PORT` running there?")
    if isinstance(error, PermissionError):
        return PermissionDenied(_ipcfloor.E_PERMISSION, f"{server}: {error.strerror or error}")
    if isinstance(error, (socket.timeout, TimeoutError)):
        return Timeout(_ipcfloor.E_TIMEOUT, f"{server} did not take the connection within the timeout")
    return ProtocolError(f"cannot connect to {server}: {error}")


class SocketClient:
    """One connection to `ipcfloor serve --socket PATH` or `--tcp HOST:PORT`; one call at a time."""

    def __init__(self, sock: socket.socket, server: str, timeout: float) -> None:
        self._sock = sock
        self.server = server
        self._sock.settimeout(timeout)
        self._broken: str | None = None
        self._pending = b""  # bytes read past what the last _recv_exact needed (one reply's worth at most)
        self._one = bytearray(_ONE_COMBO.size)

    @classmethod
    def unix(cls, path: str, timeout: float = 60.0) -> SocketClient:
        """Connects to `ipcfloor serve --socket PATH`. timeout: seconds (0.001 to 86400) for the
        connect and for each send or reply."""
        seconds = _input.seconds("SocketClient.unix", timeout)
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise invalid(f"SocketClient.unix: path is {path!r}: give the socket's path")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(seconds)
        try:
            sock.connect(os.fspath(path))
        except OSError as error:
            sock.close()
            raise _connect_failed(f"unix socket {os.fsdecode(path)}", error) from error
        return cls(sock, f"unix socket {os.fsdecode(path)}", seconds)

    @classmethod
    def tcp(cls, host: str, port: int, timeout: float = 60.0) -> SocketClient:
        """Connects to `ipcfloor serve --tcp HOST:PORT`. timeout: as unix's."""
        seconds = _input.seconds("SocketClient.tcp", timeout)
        if not isinstance(host, str) or isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise invalid(f"SocketClient.tcp: host {host!r}, port {port!r}: give a host name (str) and a port in "
                          f"[1, 65535]")
        try:
            sock = socket.create_connection((host, port), timeout=seconds)
        except OSError as error:
            raise _connect_failed(f"tcp {host}:{port}", error) from error
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock, f"tcp {host}:{port}", seconds)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> SocketClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- opcodes ----------------------------------------------------------------------------

    def sweep(self, close: npt.ArrayLike, params: _input.SweepParams) -> tuple[_F64, _I64]:
        """Opcode 0: params are lengths or an (n, 6) array of windows; returns (pnl float64[n],
        trades int64[n])."""
        combos = _input.sweep_combos("sweep", params)
        body = self._call(OP_SWEEP, build_request(OP_SWEEP, _closes("sweep", close), combos))
        return self._results(body, combos.shape[0])

    def echo(self, close: npt.ArrayLike) -> _F64:
        """Opcode 1: the close array back, verbatim."""
        bars = _closes("echo", close)
        body = self._call(OP_ECHO, build_request(OP_ECHO, bars))
        if len(body) != bars.nbytes:
            self._break(f"{self.server} echoed {len(body)} bytes for the {bars.nbytes} sent")
        return np.frombuffer(body, dtype="<f8")

    def load(self, close: npt.ArrayLike) -> tuple[int, float]:
        """Opcode 2: the series becomes this connection's. Returns (fnv1a64 checksum, fee)."""
        body = self._call(OP_LOAD, build_request(OP_LOAD, _closes("load", close)))
        if len(body) != 16:
            self._break(f"{self.server} answered load with {len(body)} bytes instead of 16")
        checksum, fee = struct.unpack("<Qd", body)
        return int(checksum), float(fee)

    def sweep_loaded(self, params: _input.SweepParams) -> tuple[_F64, _I64]:
        """Opcode 3: combos only (lengths or an (n, 6) array), over the loaded series; returns
        (pnl, trades)."""
        combos = _input.sweep_combos("sweep_loaded", params)
        body = self._call(OP_SWEEP_LOADED, build_request(OP_SWEEP_LOADED, None, combos))
        return self._results(body, combos.shape[0])

    def use_preloaded(self) -> ServerSeries:
        """Opcode 5: the server's preloaded series becomes this connection's (sweep_loaded and
        backtest then run on it). Returns ServerSeries(name, bars, checksum, fee); a server that
        holds none raises ServerError no_preloaded_series."""
        body = self._call(OP_USE_PRELOADED, build_request(OP_USE_PRELOADED))
        if len(body) < _PRELOADED.size:
            self._break(f"{self.server} answered use_preloaded with {len(body)} bytes")
        checksum, fee, bars, name_len = _PRELOADED.unpack_from(body)
        if len(body) != _PRELOADED.size + name_len:
            self._break(f"{self.server} answered use_preloaded with {len(body)} bytes for a {name_len}-byte name")
        name = body[_PRELOADED.size:].decode("utf-8", errors="replace")
        return ServerSeries(name, bars, checksum, fee)

    def backtest(self, params: Any) -> tuple[float, int]:
        """One combo over the connection's series (opcode 3 with one combo): (pnl, trades).

        The lean path for one request at a time: the frame is packed into a buffer kept for it,
        and the whole 20-byte reply is usually read by one recv."""
        try:
            _ONE_COMBO.pack_into(self._one, 0, _ONE_COMBO.size - 4, OP_SWEEP_LOADED, 0, 1, *params)
        except (struct.error, TypeError):
            # Not six ints within int64 as they stand: judged (and refused, or made exact) as everywhere.
            _ONE_COMBO.pack_into(self._one, 0, _ONE_COMBO.size - 4, OP_SWEEP_LOADED, 0, 1,
                                 *_input.six("backtest", params))
        body = self._call(OP_SWEEP_LOADED, self._one, expect=_ONE_RESULT.size)
        if len(body) != 16:
            self._break(f"{self.server} answered one combo with {len(body)} bytes instead of 16")
        pnl, trades = struct.unpack("<dq", body)
        return float(pnl), int(trades)

    def echo_params(self, combo: Any) -> tuple[int, ...]:
        """Opcode 4: the six windows back, verbatim (the 48-byte round trip)."""
        body = self._call(OP_ECHO_PARAMS, build_request(OP_ECHO_PARAMS, None, [_input.six("echo_params", combo)]))
        if len(body) != 48:
            self._break(f"{self.server} answered echo_params with {len(body)} bytes instead of 48")
        return tuple(int(v) for v in struct.unpack("<6q", body))

    def call_raw(self, frame: bytes, opcode: int | None = None) -> bytes:
        """Sends a caller-built frame and returns the success body (or raises ServerError)."""
        return self._call(opcode, frame)

    # ---- framing ------------------------------------------------------------------------------

    def _results(self, body: bytes, n: int) -> tuple[_F64, _I64]:
        if len(body) != 16 * n:
            self._break(f"{self.server} answered a sweep of {n} combos with {len(body)} bytes instead of {16 * n}")
        return np.frombuffer(body, dtype="<f8", count=n).copy(), np.frombuffer(body, dtype="<i8", offset=8 * n).copy()

    def _break(self, why: str) -> NoReturn:
        self._broken = why
        raise ProtocolError(why)

    def _call(self, opcode: int | None, frame: bytes | bytearray, expect: int = 4) -> bytes:
        """Sends one frame and returns its success body. `expect` is how many bytes the reply is
        likely to be, so a small reply arrives in one recv; nothing past one reply is ever read."""
        if self._broken:
            raise ProtocolError(f"the connection to {self.server} is unusable: {self._broken}; reconnect")
        try:
            self._sock.sendall(frame)
        except (BrokenPipeError, ConnectionResetError):
            # The server may have refused the frame and closed early: its error reply says why.
            pass
        except socket.timeout:
            self._break(f"{self.server} did not take the request within the timeout")
        except OSError as error:  # a closed socket (close()), or another system error
            self._break(f"sending to {self.server} failed: {error}")
        first = _U32.unpack(self._recv_exact(4, hint=expect))[0]
        if first != ERROR_MARKER:
            return self._recv_exact(first)
        code, length = struct.unpack("<II", self._recv_exact(8))
        if length > MAX_ERROR_MESSAGE:
            self._break(f"{self.server} sent an error reply with a {length}-byte message")
        message = self._recv_exact(length).decode("utf-8", errors="replace")
        if code in FATAL_ERRORS:
            self._broken = f"the server closed it after {ERROR_NAMES.get(code, code)}"
        raise ServerError(self.server, opcode, code, message)

    def _recv_exact(self, n: int, hint: int = 0) -> bytes:
        """n bytes of the reply. With a hint, up to `hint` bytes are asked for at once; the
        server sends nothing unasked, so what is read past n still belongs to this reply."""
        chunks = bytearray(self._pending[:n])
        self._pending = self._pending[n:]
        while len(chunks) < n:
            try:
                chunk = self._sock.recv(max(min(n - len(chunks), 1 << 20), hint - len(chunks)))
            except socket.timeout:
                self._break(f"{self.server} did not answer within the timeout")
            except ConnectionResetError:
                chunk = b""
            except OSError as error:
                self._break(f"reading from {self.server} failed: {error}")
            if not chunk:
                self._break(f"{self.server} closed the connection after {len(chunks)} of {n} bytes")
            chunks += chunk
        if len(chunks) > n:
            self._pending = bytes(chunks[n:])
            del chunks[n:]
        return bytes(chunks)
