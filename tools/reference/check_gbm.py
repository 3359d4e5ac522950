#!/usr/bin/python3
"""Checks a generated GBM series (docs/SPEC.md §1, the default data set) against numpy.

    /usr/bin/python3 tools/reference/check_gbm.py --series close.f64 --bars 150000 --seed 42
        [--mu 0.05 --sigma 0.30 --s0 100 --dt 1/98280] [--rtol 1e-14]

The file is raw little-endian float64, one close per bar (what `ipcfloor gen -o FILE.f64`
writes). numpy builds the expected series exactly as docs/SPEC.md §1 states. Every bar must agree
within --rtol relative; the script prints the maximum relative error and, on failure, the
first bars that disagree, and exits 1 (2 for an unusable file or arguments).
"""

import argparse
import os
import sys

import numpy as np


def numpy_series(bars, seed, mu, sigma, s0, dt):
    rng = np.random.default_rng(seed)
    lr = mu * dt + sigma * np.sqrt(dt) * rng.standard_normal(bars - 1)
    close = np.empty(bars)
    close[0] = s0
    close[1:] = s0 * np.exp(np.cumsum(lr))
    return close


def parse_float(text):
    """Accepts plain floats and simple fractions such as 1/98280."""
    if "/" in text:
        num, den = text.split("/", 1)
        return float(num) / float(den)
    return float(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", required=True, help="raw little-endian float64 file")
    parser.add_argument("--bars", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--mu", type=parse_float, default=0.05)
    parser.add_argument("--sigma", type=parse_float, default=0.30)
    parser.add_argument("--s0", type=parse_float, default=100.0)
    parser.add_argument("--dt", type=parse_float, default=1.0 / (252 * 390))
    parser.add_argument("--rtol", type=float, default=1e-14)
    args = parser.parse_args()

    if args.bars < 2:
        print("check_gbm: --bars must be at least 2 (got %d)" % args.bars, file=sys.stderr)
        return 2
    try:
        size = os.path.getsize(args.series)
    except OSError as err:
        print("check_gbm: cannot read %s: %s" % (args.series, err.strerror), file=sys.stderr)
        return 2
    if size != 8 * args.bars:
        print("check_gbm: %s holds %d bytes, expected %d (%d bars of float64)%s"
              % (args.series, size, 8 * args.bars, args.bars,
                 "" if size % 8 else " -- it has %d bars" % (size // 8)), file=sys.stderr)
        return 2

    got = np.fromfile(args.series, dtype="<f8")
    want = numpy_series(args.bars, args.seed, args.mu, args.sigma, args.s0, args.dt)

    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(got - want) / np.abs(want)
    rel[~np.isfinite(got)] = np.inf
    worst = int(np.argmax(rel))
    identical = int(np.count_nonzero(got == want))
    print("check_gbm: %d bars, seed %d: max relative error %.3e at bar %d; %d of %d bars "
          "bit-identical" % (args.bars, args.seed, rel[worst], worst, identical, args.bars))

    bad = np.flatnonzero(rel > args.rtol)
    if bad.size == 0:
        print("check_gbm: OK (every bar within %.0e relative of numpy)" % args.rtol)
        return 0
    print("check_gbm: MISMATCH: %d bars differ from numpy by more than %.0e relative; first ones:"
          % (bad.size, args.rtol), file=sys.stderr)
    for i in bad[:5]:
        print("  bar %d: got %.17g, numpy %.17g (relative error %.3e)"
              % (i, got[i], want[i], rel[i]), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
