/* ipcfloor's strategy ABI: what a shared object gives `ipcfloor serve --strategy FILE.so` so the
 * engine can backtest a researcher's own strategy at the same floor, on the same workers and with
 * the same admission as the built-in HMA/HMA3 (strategy 0, which goes through this very
 * interface), and compute the same statistics from its trades (docs/STATISTICS.md).
 *
 * A strategy is a table of plain C functions over plain data: no C++ type crosses this boundary.
 * The shared object exports one function, named IPCFLOOR_STRATEGY_ENTRY, that returns a pointer to
 * a static, constant ipcfloor_strategy:
 *
 *   #include <ipcfloor/strategy.h>
 *   static const ipcfloor_strategy kSma = {
 *     .abi_version = IPCFLOOR_STRATEGY_ABI_VERSION, .struct_size = sizeof(ipcfloor_strategy),
 *     .name = "sma_cross", .param_count = 2, .param_names = {"fast", "slow"},
 *     .example_params = {10, 40}, .validate = sma_validate, .cost = sma_cost,
 *     .workspace_bytes = sma_workspace_bytes, .run = sma_run, ...live part or nothing... };
 *   IPCFLOOR_STRATEGY_EXPORT const ipcfloor_strategy* ipcfloor_strategy_v2(void) { return &kSma; }
 *
 * Versions. This is version 2: run() gets the bars as columns (close, and open, high, low and
 * volume where the series has them), declares the columns it requires, and reports each closed
 * trade to an engine-provided sink. A version-1 shared object (it exports ipcfloor_strategy_v1,
 * which returns an ipcfloor_strategy_v1 table, below) still loads and runs unchanged: it sees the
 * closes only, and reports no trades, so its requests for statistics are answered with the status
 * no_trade_report.
 *
 * The engine checks at load: the ABI version, the struct's size, the name (1-31 characters of
 * [a-z0-9_-], unique among loaded strategies), the parameter count (1..6) and names, the
 * required columns (bits of IPCFLOOR_COLUMN_* only), that every required function is present and
 * the live part is all present or all absent, and a self-check on a short generated series (with
 * every column): example_params are accepted, cost a finite number of units and run a finite pnl
 * with trades >= 0; the trades it reports are as many as it counts, well formed (below) and sum
 * to its pnl bit for bit; each parameter set to INT64_MIN or INT64_MAX is refused (a strategy
 * bounds every parameter it uses, so no request can ask for unbounded work); and, with a live
 * part, step() bar by bar ends on run()'s pnl and trades, bit for bit. docs/STRATEGIES.md walks
 * through writing, building, loading, testing and sweeping one.
 *
 * Trust. A loaded strategy is trusted code inside the engine, like a database extension: it runs
 * in the engine's address space with the engine's rights. The engine still guarantees that a
 * non-finite pnl, a negative trade count or trade reports that disagree with them become
 * `engine_error` for that request, never a wrong answer marked ok.
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

/* The version of this ABI. The engine loads a table whose abi_version is 2 and whose struct_size
 * is sizeof(ipcfloor_strategy) as the engine was built, or a version-1 table (below). */
#define IPCFLOOR_STRATEGY_ABI_VERSION 2
/* The symbol a version-2 shared object exports: const ipcfloor_strategy* (*)(void). */
#define IPCFLOOR_STRATEGY_ENTRY "ipcfloor_strategy_v2"
/* The symbol a version-1 shared object exports: const ipcfloor_strategy_v1* (*)(void). */
#define IPCFLOOR_STRATEGY_ENTRY_V1 "ipcfloor_strategy_v1"
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

/* The columns of a series. Close is always there; the others where the data had them
 * (`serve --data prices.csv` keeps Open, High, Low and Volume). required_columns names those
 * run() cannot do without: a request on a series that lacks one is refused (status
 * missing_column), never answered from a NULL column. */
#define IPCFLOOR_COLUMN_CLOSE 0x01u
#define IPCFLOOR_COLUMN_OPEN 0x02u
#define IPCFLOOR_COLUMN_HIGH 0x04u
#define IPCFLOOR_COLUMN_LOW 0x08u
#define IPCFLOOR_COLUMN_VOLUME 0x10u
#define IPCFLOOR_COLUMNS_ALL 0x1Fu

/* The bars run() and step() see: n_bars of each column, oldest first. close is never NULL, and
 * every close is finite and > 0; open, high and low, where present, are finite and > 0, volume
 * finite and >= 0. A column the series lacks is NULL. */
typedef struct ipcfloor_columns {
  const double* close;
  const double* open;
  const double* high;
  const double* low;
  const double* volume;
  uint64_t n_bars;
} ipcfloor_columns;

/* One backtest's result: the closed-trade pnl (percentage points, net of fees) and the number of
 * closed round trips. */
typedef struct ipcfloor_strategy_result {
  double pnl;
  int64_t trades;
} ipcfloor_strategy_result;

/* One closed trade, as run() reports it. Bars are indices into the bars run() was given. The
 * engine's statistics (docs/STATISTICS.md) need, and check:
 *   - entry_bar <= exit_bar < n_bars, and entry_bar >= the previous trade's exit_bar: trades are
 *     reported in order and do not overlap (one position at a time; a reversal closes one trade
 *     and opens the next on the same bar);
 *   - side is +1 (long) or -1 (short); entry_price and exit_price finite and > 0;
 *   - pnl is finite and is exactly the value run() adds to its pnl for this trade, in this order
 *     (percentage points, net of the fee), so that the reports, summed in order from 0.0, give
 *     run()'s pnl bit for bit, and their count its trades. */
typedef struct ipcfloor_trade {
  uint64_t entry_bar;
  uint64_t exit_bar;
  double entry_price;
  double exit_price;
  double pnl;
  int32_t side;
  uint32_t reserved; /* 0 */
} ipcfloor_trade;

/* Where run() reports its trades. A NULL sink (a plain BACKTEST) asks for none: the strategy
 * skips the reports. The callback is the engine's: it copies the trade and returns at once; it
 * never allocates and never fails. */
typedef struct ipcfloor_trade_sink {
  void (*report)(void* context, const ipcfloor_trade* trade);
  void* context;
} ipcfloor_trade_sink;

/* Reports one closed trade to `sink` (nothing when sink is NULL). */
static inline void ipcfloor_report_trade(const ipcfloor_trade_sink* sink, uint64_t entry_bar, uint64_t exit_bar,
                                         int32_t side, double entry_price, double exit_price, double pnl) {
  if (sink == NULL) return;
  ipcfloor_trade trade;
  trade.entry_bar = entry_bar;
  trade.exit_bar = exit_bar;
  trade.entry_price = entry_price;
  trade.exit_price = exit_price;
  trade.pnl = pnl;
  trade.side = side;
  trade.reserved = 0;
  sink->report(sink->context, &trade);
}

/* One bar of a live subscription (the optional live part): the strategy's two named values at
 * this bar (NaN while they warm up; value_names says what they are), the signal at this bar
 * (+1 a long entry or reversal, -1 a short one, 0 none), the position it leaves (+1, -1, 0) and
 * the running pnl and trades, which after bar i must equal run()'s over bars 0..i, bit for bit. */
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
  /* IPCFLOOR_COLUMN_* bits of the columns run() and step() need besides close (0: close only). */
  uint32_t required_columns;
  const char* param_names[IPCFLOOR_STRATEGY_MAX_PARAMS]; /* the first param_count are set */
  /* A combo validate() accepts on any series of at least 100 bars: the engine's self-check runs
   * it, and `status` shows it as an example. Unused parameters are 0. */
  int64_t example_params[IPCFLOOR_STRATEGY_MAX_PARAMS];

  /* 0 when params[0..param_count) can run on a series of n_bars bars; otherwise 1 + the index of
   * the parameter it refuses (any other nonzero value: "some parameter"), with a sentence naming
   * that parameter and its allowed range written (NUL-terminated, cut to fit) into
   * why[0..why_bytes) when why is not NULL. The engine answers a refused request
   * `window_out_of_range` and carries the sentence to the client. Pure. */
  int (*validate)(const int64_t* params, uint64_t n_bars, char* why, size_t why_bytes);
  /* The work of run() on n_bars bars, in work units (about one multiply-add each), for params
   * validate() accepted. Pure, and saturating at UINT64_MAX instead of wrapping: the engine
   * refuses a request whose cost exceeds `serve --max-frame-cost`, the same verdict on every host. */
  uint64_t (*cost)(const int64_t* params, uint64_t n_bars);
  /* The bytes of workspace run() needs for a series of n_bars bars, for any valid params. */
  uint64_t (*workspace_bytes)(uint64_t n_bars);
  /* Backtests params (validated) over bars->n_bars bars (>= 2; every column required_columns
   * names is present) with `fee` percentage points per closed round trip, using `workspace`
   * (workspace_bytes(n_bars) bytes, IPCFLOOR_STRATEGY_ALIGN-aligned, contents undefined) as
   * scratch. Reports every closed trade to `sink` as it closes (ipcfloor_report_trade; sink may
   * be NULL). Fills *out and returns 0, or returns nonzero if it cannot (the request is answered
   * engine_error). A position still open at the end is neither counted nor reported. */
  int (*run)(const ipcfloor_columns* bars, const int64_t* params, double fee, void* workspace,
             const ipcfloor_trade_sink* sink, ipcfloor_strategy_result* out);

  /* ---- Optional: live mode. All four set, or all NULL (SUBSCRIBE is then refused). ---------- */
  const char* value_names[2]; /* what ipcfloor_strategy_bar.value[0] and [1] hold */
  /* The bytes of one subscription's state for params (validated), IPCFLOOR_STRATEGY_ALIGN-aligned. */
  uint64_t (*state_bytes)(const int64_t* params);
  /* Prepares a subscription's state before its first bar. The state stays at this address for
   * its whole life, so it may point into itself. */
  void (*init)(void* state, const int64_t* params, double fee);
  /* Evaluates the newest bar, bars->n_bars - 1, where bars holds the whole series so far (called
   * once per bar, in order, from the first bar), and fills *out. */
  void (*step)(void* state, const ipcfloor_columns* bars, ipcfloor_strategy_bar* out);
  /* What one more bar costs step() for params, in work units (saturating). */
  uint64_t (*step_cost)(const int64_t* params);
} ipcfloor_strategy;

/* The entry point a version-2 shared object exports (see IPCFLOOR_STRATEGY_ENTRY). */
typedef const ipcfloor_strategy* (*ipcfloor_strategy_entry)(void);

/* ---- Version 1, as it was: the engine still loads these tables. ------------------------------
 * run() and step() see the closes only, and run() reports no trades. New strategies are written
 * against version 2 above. */
typedef struct ipcfloor_strategy_v1 {
  uint32_t abi_version; /* 1 */
  uint32_t struct_size; /* sizeof(ipcfloor_strategy_v1) */
  const char* name;
  uint32_t param_count;
  const char* param_names[IPCFLOOR_STRATEGY_MAX_PARAMS];
  int64_t example_params[IPCFLOOR_STRATEGY_MAX_PARAMS];
  int (*validate)(const int64_t* params, uint64_t n_bars, char* why, size_t why_bytes);
  uint64_t (*cost)(const int64_t* params, uint64_t n_bars);
  uint64_t (*workspace_bytes)(uint64_t n_bars);
  int (*run)(const double* close, uint64_t n_bars, const int64_t* params, double fee, void* workspace,
             ipcfloor_strategy_result* out);
  const char* value_names[2];
  uint64_t (*state_bytes)(const int64_t* params);
  void (*init)(void* state, const int64_t* params, double fee);
  void (*step)(void* state, const double* close, uint64_t n_bars, ipcfloor_strategy_bar* out);
  uint64_t (*step_cost)(const int64_t* params);
} ipcfloor_strategy_v1;

/* The entry point a version-1 shared object exports (see IPCFLOOR_STRATEGY_ENTRY_V1). */
typedef const ipcfloor_strategy_v1* (*ipcfloor_strategy_entry_v1)(void);

#ifdef __cplusplus
}
#endif

#endif /* IPCFLOOR_STRATEGY_H */
