/* The strategy ABI header exactly as version 1 shipped it. tests/strategies/probe.c is built against
 * it, so the tests prove that a shared object built before version 2 still loads and runs. */
/* ipcfloor's strategy ABI: what a shared object gives `ipcfloor serve --strategy FILE.so` so the
 * engine can backtest a researcher's own strategy at the same floor, on the same workers and with
 * the same admission as the built-in HMA/HMA3 (strategy 0, which goes through this very
 * interface).
 *
 * A strategy is a table of plain C functions over plain data: no C++ type crosses this boundary.
 * The shared object exports one function, named IPCFLOOR_STRATEGY_ENTRY, that returns a pointer to
 * a static, constant ipcfloor_strategy:
 *
 *   #include <ipcfloor/strategy.h>
 *   static const ipcfloor_strategy kSma = {
 *     IPCFLOOR_STRATEGY_ABI_VERSION, sizeof(ipcfloor_strategy), "sma_cross", 2, {"fast", "slow"},
 *     {10, 40}, sma_validate, sma_cost, sma_workspace_bytes, sma_run, ...live part or zeros... };
 *   IPCFLOOR_STRATEGY_EXPORT const ipcfloor_strategy* ipcfloor_strategy_v1(void) { return &kSma; }
 *
 * The engine checks at load: the ABI version, the struct's size, the name (1-31 characters of
 * [a-z0-9_-], unique among loaded strategies), the parameter count (1..6) and names, that every
 * required function is present and the live part is all present or all absent, and a self-check
 * on a short generated series: example_params are accepted, cost a finite number of units and
 * run a finite pnl with trades >= 0; each parameter set to INT64_MIN or INT64_MAX is refused (a
 * strategy bounds every parameter it uses, so no request can ask for unbounded work); and, with a
 * live part, step() bar by bar ends on run()'s pnl and trades, bit for bit. docs/STRATEGIES.md walks through writing, building, loading, testing and sweeping one.
 *
 * Trust. A loaded strategy is trusted code inside the engine, like a database extension: it runs
 * in the engine's address space with the engine's rights. The engine still guarantees that a
 * non-finite pnl or a negative trade count becomes `engine_error` for that request, never a
 * wrong answer marked ok.
 *
 * Threads. validate() and cost() run on the engine's serving thread (admission, once per
 * request) and in client-side tools; run() runs on any worker thread, or on the serving thread
 * for cheap requests, many at once on different workspaces: a strategy must be reentrant across
 * workspaces and keep no mutable global state. The live functions run on the serving thread or a
 * worker, one subscription at a time per state. None of them may allocate, make a system call,
 * block, throw (from C++) or read anything but its arguments; all must be deterministic: the same
 * arguments give the same bits on every call, thread and host. Build with -ffp-contract=off (the
 * CMake function ipcfloor_add_strategy does) so the compiler fuses no multiply-add the reference
 * does not. */
#ifndef IPCFLOOR_STRATEGY_H
#define IPCFLOOR_STRATEGY_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define IPCFLOOR_STRATEGY_EXPORT __attribute__((visibility("default")))
#else
#define IPCFLOOR_STRATEGY_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this ABI. The engine loads a strategy only if its abi_version equals the
 * engine's and its struct_size is sizeof(ipcfloor_strategy) as the engine was built. */
#define IPCFLOOR_STRATEGY_ABI_VERSION 1
/* The symbol a strategy's shared object exports: const ipcfloor_strategy* (*)(void). */
#define IPCFLOOR_STRATEGY_ENTRY "ipcfloor_strategy_v1"
/* A request carries six int64 parameters; a strategy uses the first param_count of them and the
 * engine refuses a request whose unused ones are not 0. */
#define IPCFLOOR_STRATEGY_MAX_PARAMS 6
/* Strategies one engine serves, the built-in one included: a request names one by its index. */
#define IPCFLOOR_MAX_STRATEGIES 16
/* Longest name (without its NUL), of the strategy and of each parameter and value. */
#define IPCFLOOR_STRATEGY_NAME_MAX 31
/* validate() writes at most this many bytes, NUL included, into its `why`. */
#define IPCFLOOR_STRATEGY_WHY_BYTES 128
/* The engine hands run() a workspace aligned to this many bytes. */
#define IPCFLOOR_STRATEGY_ALIGN 64

/* One backtest's result: the closed-trade pnl (percentage points, net of fees) and the number of
 * closed round trips. */
typedef struct ipcfloor_strategy_result {
  double pnl;
  int64_t trades;
} ipcfloor_strategy_result;

/* One bar of a live subscription (the optional live part): the strategy's two named values at
 * this bar (NaN while they warm up; value_names says what they are), the signal at this bar
 * (+1 a long entry or reversal, -1 a short one, 0 none), the position it leaves (+1, -1, 0) and
 * the running pnl and trades, which after bar i must equal run()'s over close[0..i], bit for bit. */
typedef struct ipcfloor_strategy_bar {
  double value[2];
  double pnl;
  int64_t trades;
  int32_t signal;
  int32_t position;
} ipcfloor_strategy_bar;

typedef struct ipcfloor_strategy {
  uint32_t abi_version; /* IPCFLOOR_STRATEGY_ABI_VERSION */
  uint32_t struct_size; /* sizeof(ipcfloor_strategy) */
  const char* name;     /* 1-31 characters of [a-z0-9_-] */
  uint32_t param_count; /* 1..IPCFLOOR_STRATEGY_MAX_PARAMS */
  const char* param_names[IPCFLOOR_STRATEGY_MAX_PARAMS]; /* the first param_count are set */
  /* A combo validate() accepts on any series of at least 100 bars: the engine's self-check runs
   * it, and `status` shows it as an example. Unused parameters are 0. */
  int64_t example_params[IPCFLOOR_STRATEGY_MAX_PARAMS];

  /* 0 when params[0..param_count) can run on a series of n_bars bars; otherwise 1 + the index of
   * the parameter it refuses (any other nonzero value: "some parameter"), with a sentence naming
   * that parameter and its allowed range written (NUL-terminated, cut to fit) into
   * why[0..why_bytes) when why is not NULL. The engine answers a refused request
   * `window_out_of_range`, naming the parameter. Pure. */
  int (*validate)(const int64_t* params, uint64_t n_bars, char* why, size_t why_bytes);
  /* The work of run() on n_bars bars, in work units (about one multiply-add each), for params
   * validate() accepted. Pure, and saturating at UINT64_MAX instead of wrapping: the engine
   * refuses a request whose cost exceeds `serve --max-frame-cost`, the same verdict on every host. */
  uint64_t (*cost)(const int64_t* params, uint64_t n_bars);
  /* The bytes of workspace run() needs for a series of n_bars bars, for any valid params. */
  uint64_t (*workspace_bytes)(uint64_t n_bars);
  /* Backtests params (validated) over close[0..n_bars) (n_bars >= 2, every close finite and > 0)
   * with `fee` percentage points per closed round trip, using `workspace` (workspace_bytes(n_bars)
   * bytes, IPCFLOOR_STRATEGY_ALIGN-aligned, contents undefined) as scratch. Fills *out and returns
   * 0, or returns nonzero if it cannot (the request is answered engine_error). */
  int (*run)(const double* close, uint64_t n_bars, const int64_t* params, double fee, void* workspace,
             ipcfloor_strategy_result* out);

  /* ---- Optional: live mode. All four set, or all NULL (SUBSCRIBE is then refused). ---------- */
  const char* value_names[2]; /* what ipcfloor_strategy_bar.value[0] and [1] hold */
  /* The bytes of one subscription's state for params (validated), IPCFLOOR_STRATEGY_ALIGN-aligned. */
  uint64_t (*state_bytes)(const int64_t* params);
  /* Prepares a subscription's state before its first bar. The state stays at this address for
   * its whole life, so it may point into itself. */
  void (*init)(void* state, const int64_t* params, double fee);
  /* Evaluates the newest bar, close[n_bars - 1], where close[0..n_bars) is the whole series so far
   * (called once per bar, in order, from the first bar), and fills *out. */
  void (*step)(void* state, const double* close, uint64_t n_bars, ipcfloor_strategy_bar* out);
  /* What one more bar costs step() for params, in work units (saturating). */
  uint64_t (*step_cost)(const int64_t* params);
} ipcfloor_strategy;

/* The entry point a strategy's shared object exports (see IPCFLOOR_STRATEGY_ENTRY). */
typedef const ipcfloor_strategy* (*ipcfloor_strategy_entry)(void);

#ifdef __cplusplus
}
#endif

#endif /* IPCFLOOR_STRATEGY_H */
