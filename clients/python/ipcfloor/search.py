"""Searches beyond grids, through an engine's pipelined sweeps.

optuna(engine, strategy, space, n_trials, metric) runs an Optuna study by ask-and-tell: each
generation of trials is asked at once, run as one sweep with statistics (one C call, the ring kept
full), and told its figures. Optuna is Debian's python3-optuna (3.1); it is imported only when a
search runs, so the package works without it.

    import ipcfloor, ipcfloor.search
    with ipcfloor.attach("prices") as engine:
        study = ipcfloor.search.optuna(engine, "sma_cross", {"fast": (2, 50), "slow": (10, 400)},
                                       n_trials=500, metric="sharpe", seed=7)
        print(study.best_params, study.best_value)
"""

from __future__ import annotations

import importlib
import math
import warnings
from typing import Any, Mapping, Sequence, Union

import numpy as np

from ._engine import STATS_FIGURES, Engine
from ._errors import invalid

__all__ = ["optuna"]

# Trials per generation by default: a sweep of them keeps a ring busy, and the sampler still learns
# from every generation (a larger one searches more at random).
_BATCH = 16
# A parameter's range: (low, high) or (low, high, step), whole numbers, both ends included; or one
# whole number, the parameter fixed.
Bounds = Union[int, Sequence[int]]


def _load_optuna() -> Any:
    """Optuna, or ImportError saying where it comes from."""
    try:
        return importlib.import_module("optuna")
    except ImportError as error:
        raise ImportError("ipcfloor.search.optuna needs Optuna: apt-get install python3-optuna (Debian), or pip "
                          "install optuna") from error


def _distributions(optuna: Any, names: Sequence[str], space: Mapping[str, Bounds]) -> tuple[dict[str, Any], dict[str, int]]:
    """Optuna's integer distributions of the searched parameters, and the fixed ones' values."""
    unknown = sorted(set(space) - set(names))
    missing = [name for name in names if name not in space]
    if unknown or missing:
        raise invalid(f"search.optuna: space names {sorted(space)}; the strategy's parameters are {list(names)}"
                      f"{f' (unknown: {unknown})' if unknown else ''}{f' (missing: {missing})' if missing else ''}: "
                      f"give each a (low, high), a (low, high, step) or a fixed value")
    searched: dict[str, Any] = {}
    fixed: dict[str, int] = {}
    for name in names:
        bounds = space[name]
        if isinstance(bounds, (int, np.integer)) and not isinstance(bounds, bool):
            fixed[name] = int(bounds)
            continue
        values = list(bounds) if isinstance(bounds, (tuple, list)) else []
        whole = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values)
        if not (whole and len(values) in (2, 3) and values[0] <= values[1] and (len(values) == 2 or values[2] >= 1)):
            raise invalid(f"search.optuna: space[{name!r}] is {bounds!r}: give whole numbers (low, high) or "
                          f"(low, high, step), low <= high, step >= 1, or one fixed whole number")
        step = int(values[2]) if len(values) == 3 else 1
        searched[name] = optuna.distributions.IntDistribution(int(values[0]), int(values[1]), step=step)
    return searched, fixed


def optuna(engine: Engine, strategy: str | int, space: Mapping[str, Bounds], n_trials: int, metric: str,
           direction: str = "maximize", *, batch: int | None = None, seed: int | None = None,
           study: Any = None, series: int | str = 0, bars: slice | None = None, fee: float | None = None,
           bars_per_year: float | None = None, progress: bool = False) -> Any:
    """Runs `n_trials` trials of an Optuna study over strategy `strategy`'s parameters through
    `engine`, and returns the study (optuna.Study: best_params, best_value, trials_dataframe()).

    space: every parameter of the strategy (Engine.strategies() names them) by name: (low, high)
    or (low, high, step), whole numbers with both ends included, or one whole number to fix it.
    metric: the figure the study optimises: "pnl", "trades" or one of STATS_FIGURES ("sharpe",
    "profit_factor", ...; docs/STATISTICS.md). direction: "maximize" or "minimize".
    batch: the trials asked at once and run as one sweep(stats=True) (default 16, or the engine's
    ring capacity if smaller); each is told its figure. A combo the strategy refuses,
    or whose figure is NaN (no trades for a ratio), is told failed; every trial carries the
    combo's pnl, trades, status and reason as user attributes.
    seed: the default sampler's seed (TPE with constant liar, so a batch's trials spread), for a
    study that runs the same on every host. study: an existing optuna.Study to continue (its own
    direction and sampler; seed is then unused). series, bars, fee, bars_per_year: as Engine.sweep
    takes them. progress: a tqdm bar over the trials where tqdm is installed."""
    opt = _load_optuna()
    if metric not in ("pnl", "trades", *STATS_FIGURES):
        raise invalid(f"search.optuna: metric is {metric!r}: give pnl, trades or one of {', '.join(STATS_FIGURES)}")
    if direction not in ("maximize", "minimize"):
        raise invalid(f"search.optuna: direction is {direction!r}: give 'maximize' or 'minimize'")
    if isinstance(n_trials, bool) or not isinstance(n_trials, (int, np.integer)) or n_trials < 1:
        raise invalid(f"search.optuna: n_trials is {n_trials!r}: give a whole number >= 1")
    chosen = engine.strategies()[engine._strategy_index("search.optuna", strategy)]  # NoSuchStrategy names them
    size = min(_BATCH, max(1, engine.ring_capacity)) if batch is None else batch
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise invalid(f"search.optuna: batch is {batch!r}: give a whole number >= 1")
    searched, fixed = _distributions(opt, chosen.params, space)
    if study is None:
        with warnings.catch_warnings():  # constant_liar is "experimental" in Optuna 3.1; it is what batches need
            warnings.simplefilter("ignore", opt.exceptions.ExperimentalWarning)
            sampler = opt.samplers.TPESampler(seed=seed, constant_liar=True)
        study = opt.create_study(direction=direction, sampler=sampler)
    bar = _progress(n_trials) if progress else None
    done = 0
    while done < n_trials:
        trials = [study.ask(searched) for _ in range(min(int(size), n_trials - done))]
        combos = np.zeros((len(trials), 6), np.int64)
        for k, name in enumerate(chosen.params):
            combos[:, k] = [fixed[name] if name in fixed else trial.params[name] for trial in trials]
        table = engine.sweep(combos, series, strategy=chosen.number, stats=True, bars=bars, fee=fee,
                             bars_per_year=bars_per_year)
        for i, trial in enumerate(trials):
            _tell(opt, study, trial, table, i, metric)
        done += len(trials)
        if bar is not None:
            bar.update(len(trials))
    if bar is not None:
        bar.close()
    return study


def _tell(opt: Any, study: Any, trial: Any, table: Mapping[str, Any], i: int, metric: str) -> None:
    """Tells the study trial i's figure, or that it failed (refused, or a NaN figure)."""
    status = int(table["status"][i])
    trial.set_user_attr("pnl", float(table["pnl"][i]))
    trial.set_user_attr("trades", int(table["trades"][i]))
    trial.set_user_attr("status", status)
    trial.set_user_attr("reason", str(table["reason"][i]))
    value = float(table[metric][i])
    if status != 0 or math.isnan(value):
        study.tell(trial, state=opt.trial.TrialState.FAIL)
    else:
        study.tell(trial, value)


def _progress(total: int) -> Any:
    try:
        return importlib.import_module("tqdm").tqdm(total=total, desc="trials", unit="trial")
    except ImportError:
        return None
