#!/usr/bin/python3
"""examples/python/optuna_search.py against a real engine that loaded sma_cross (ctest
`python_optuna_search`): it exits 0, its best combo's figure is a STATS of that combo alone bit for
bit (the example checks it; this test checks it again from its JSON line), every trial is counted,
and the same seed gives the same best combo and value. Then ipcfloor.search.optuna's own argument
checks: a space that misses or invents a parameter, a metric or direction it does not know, bad
bounds. Skipped (exit 77, the reason printed) only where Optuna is not installed (tools/setup
installs python3-optuna).

Usage: VENV/bin/python test_python_optuna.py IPCFLOOR_BINARY STRATEGIES_DIR
"""

import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile

import ipcfloor
import ipcfloor.search
from test_python_support import check, expect, finish, start, stop

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "python", "optuna_search.py")
TRIALS = 60


def run_example(name):
    done = subprocess.run([sys.executable, EXAMPLE, name, "--trials", str(TRIALS), "--seed", "3", "--metric", "sharpe"],
                          capture_output=True, text=True, timeout=120)
    check(done.returncode == 0, f"optuna_search.py exited {done.returncode}: {done.stdout}{done.stderr}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def check_arguments(engine):
    space = {"fast": (2, 50), "slow": (10, 400)}
    for what, call in (
            ("a space missing slow", lambda: ipcfloor.search.optuna(engine, "sma_cross", {"fast": (2, 5)}, 4, "pnl")),
            ("a parameter the strategy lacks",
             lambda: ipcfloor.search.optuna(engine, "sma_cross", {**space, "mid": (1, 2)}, 4, "pnl")),
            ("an unknown metric", lambda: ipcfloor.search.optuna(engine, "sma_cross", space, 4, "alpha")),
            ("an unknown direction", lambda: ipcfloor.search.optuna(engine, "sma_cross", space, 4, "pnl", "up")),
            ("bounds low > high", lambda: ipcfloor.search.optuna(engine, "sma_cross", {**space, "fast": (9, 2)}, 4,
                                                                 "pnl")),
            ("float bounds", lambda: ipcfloor.search.optuna(engine, "sma_cross", {**space, "fast": (2.5, 9)}, 4, "pnl")),
            ("no trials", lambda: ipcfloor.search.optuna(engine, "sma_cross", space, 0, "pnl"))):
        expect(ipcfloor.InvalidArgument, what, call)
    expect(ipcfloor.NoSuchStrategy, "a strategy the engine does not serve",
           lambda: ipcfloor.search.optuna(engine, "nope", space, 4, "pnl"))
    # A fixed parameter and batches of 5: 12 trials, each its combo's figure.
    study = ipcfloor.search.optuna(engine, "sma_cross", {"fast": 5, "slow": (6, 60, 2)}, 12, "max_drawdown",
                                   "minimize", batch=5, seed=1)
    check(len(study.trials) == 12, f"12 trials run in batches of 5: {len(study.trials)}")
    for trial in study.trials:
        if trial.state.name != "COMPLETE":
            continue
        alone = engine.stats([5, trial.params["slow"]], strategy="sma_cross")["max_drawdown"]
        if not check(struct.pack("<d", alone) == struct.pack("<d", trial.value),
                     f"trial {trial.number} (slow {trial.params['slow']}): {trial.value!r}, STATS alone {alone!r}"):
            break


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: VENV/bin/python test_python_optuna.py IPCFLOOR_BINARY STRATEGIES_DIR")
    if importlib.util.find_spec("optuna") is None:
        print("test_python_optuna: SKIPPED: Optuna is not installed (tools/setup installs python3-optuna)")
        return 77
    binary, strategies = sys.argv[1:]
    name = f"ipcfloor-pyoptuna-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="ipcfloor-pyoptuna-"):
        server, engine = start(binary, name, ["--bars", "3000", "--seed", "5", "--strategy",
                                              os.path.join(strategies, "sma_cross.so")], ipcfloor)
        try:
            first = run_example(name)
            check(first.get("complete", 0) + first.get("failed", 0) == TRIALS and first.get("complete", 0) > 0,
                  f"every trial counted, some complete: {first}")
            if first:
                combo = [first["best"]["fast"], first["best"]["slow"]]
                alone = engine.stats(combo, strategy="sma_cross")
                check(struct.pack("<d", alone["sharpe"]) == struct.pack("<d", first["value"]) and
                      alone["trades"] == first["trades"], f"the best combo's sharpe is STATS alone's: {first}, {alone}")
            second = run_example(name)
            check(second.get("best") == first.get("best") and second.get("value") == first.get("value"),
                  f"the same seed finds the same best combo: {first} then {second}")
            check_arguments(engine)
            engine.close()
        finally:
            stop(server)
    return finish(f"python optuna: optuna_search.py ran {TRIALS} trials through the engine twice, the same best combo "
                  f"each time, its figure equal to a STATS alone; search.optuna's arguments checked")


if __name__ == "__main__":
    sys.exit(main())
