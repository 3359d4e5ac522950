#!/usr/bin/env python3
"""Times the numba reference sweep (single thread, @njit) and prints one JSON object.

Used by `ipcfloor bench compute`: the C++ side runs this in the same run on the same
machine, on the series it wrote (--data), and takes the median sweep time for the ratio and
the per-combo results for the parity gate. Each repeat is one whole 80-combo sweep, timed on its own.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hma_reference as ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bars", type=int, default=150_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--grid", default="6:200:80", help="FIRST:LAST:COUNT")
    ap.add_argument("--fee", type=float, default=ref.DEFAULT_FEE)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", help="raw little-endian float64 close series to run on (else generate --bars/--seed)")
    args = ap.parse_args()

    first, last, count = args.grid.split(":")
    lengths = ref.default_grid(float(first), float(last), int(count))
    if args.data:
        import numpy
        close = numpy.fromfile(args.data, dtype="<f8")
    else:
        close = ref.gbm_series(bars=args.bars, seed=args.seed)
    ref.warm_up()

    times = []
    results = None
    for _ in range(args.repeats):
        start = time.perf_counter()
        results = ref.sweep(close, lengths, args.fee)
        times.append(time.perf_counter() - start)

    import numba
    import numpy

    json.dump({
        "implementation": "numba @njit, single thread, naive WMA",
        "numba": numba.__version__,
        "numpy": numpy.__version__,
        "bars": int(close.size),
        "seed": None if args.data else args.seed,
        "data": args.data,
        "sweep_seconds": times,
        "results": [{"L": L, "params": list(p), "pnl": pnl, "trades": t} for L, p, pnl, t in results],
    }, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
