#!/usr/bin/env python3
"""An Optuna search over sma_cross's parameters through a running ipcfloor engine: each generation
of trials is asked at once and run as one pipelined sweep with statistics, then told its figure.

    ipcfloor serve --name prices --data prices.csv --strategy ./sma_cross.so &
    venv/bin/python optuna_search.py prices --trials 300 --metric sharpe --seed 7

Needs Optuna (Debian: apt-get install python3-optuna); without it, says so and exits 77.
Prints, on stdout, one JSON line: the best combo, its figure, how many trials completed and
failed (a combo the strategy refuses, or a NaN figure); then checks that a STATS of the best combo
alone gives the same figure, bit for bit (exit 1 if not).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import struct
import sys

import ipcfloor
import ipcfloor.search


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("engine", help="the engine's name (ipcfloor serve --name)")
    parser.add_argument("--strategy", default="sma_cross", help="a strategy the engine serves (default sma_cross)")
    parser.add_argument("--fast", default="2:50", help="fast's range LOW:HIGH (default 2:50)")
    parser.add_argument("--slow", default="10:400", help="slow's range LOW:HIGH (default 10:400)")
    parser.add_argument("--trials", type=int, default=200, help="trials in all (default 200)")
    parser.add_argument("--metric", default="sharpe", help="the figure to maximise (default sharpe)")
    parser.add_argument("--seed", type=int, default=7, help="the sampler's seed (default 7)")
    args = parser.parse_args()
    if importlib.util.find_spec("optuna") is None:
        print("optuna_search.py: Optuna is not installed (apt-get install python3-optuna): skipped", file=sys.stderr)
        return 77
    importlib.import_module("optuna").logging.set_verbosity(30)  # warnings only: no line per trial
    space = {name: tuple(int(v) for v in text.split(":")) for name, text in (("fast", args.fast), ("slow", args.slow))}
    try:
        with ipcfloor.attach(args.engine, timeout=5.0) as engine:
            study = ipcfloor.search.optuna(engine, args.strategy, space, n_trials=args.trials, metric=args.metric,
                                           seed=args.seed)
            states = [trial.state.name for trial in study.trials]
            best = study.best_trial
            combo = [best.params[name] for name in ("fast", "slow")]
            again = engine.stats(combo, strategy=args.strategy)[args.metric]
    except ipcfloor.Error as error:
        print(f"optuna_search.py: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"strategy": args.strategy, "metric": args.metric, "best": best.params,
                      "value": best.value, "pnl": best.user_attrs["pnl"], "trades": best.user_attrs["trades"],
                      "complete": states.count("COMPLETE"), "failed": states.count("FAIL")}))
    if struct.pack("<d", float(again)) != struct.pack("<d", float(best.value)):
        print(f"optuna_search.py: the best combo's {args.metric} is {again!r} alone, {best.value!r} in the search",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
