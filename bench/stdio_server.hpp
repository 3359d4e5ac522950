#pragma once
// `ipcfloor stdio` (hidden): the engine as a filter on its standard streams, for the ladder's
// `spawn` rung, the cost of starting a process per call. Each 48-byte frame read is the payload
// of an ECHO request; it goes through dispatch_request like any request the engine serves, and
// the 48 payload bytes of the response are written back. No framing, no text: raw bytes.

namespace ipcfloor {

// Serves frames from `in_fd` to `out_fd` until end of input. Returns 0 when the input ends on a
// frame boundary; 1 on a short final frame, a failed request or an I/O error (stderr says which).
// Setup-path code: blocking reads and writes, one frame at a time.
[[nodiscard]] int run_stdio_echo(int in_fd = 0, int out_fd = 1);

}  // namespace ipcfloor
