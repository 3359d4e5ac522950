/* ipcfloor's C ABI: attach to a running engine's shared-memory segment by name, read its
 * preloaded close series without a copy, and run backtests through the lane's rings: of the
 * built-in HMA/HMA3 strategy, or of any strategy the engine loaded (see "Strategies" below).
 *
 *   int err = 0;
 *   ipcfloor_client *c = ipcfloor_attach("ipcfloor", &err);
 *   if (!c) { fprintf(stderr, "%s\n", ipcfloor_last_error(NULL)); return 1; }
 *   const double *close = NULL;
 *   size_t bars = ipcfloor_series(c, &close);          // read-only, valid until detach
 *   int64_t params[6] = {3, 6, 2, 1, 2, 3};            // h, L, s, p3, p2, p
 *   double pnl; int64_t trades;
 *   if (ipcfloor_backtest(c, params, &pnl, &trades) != IPCFLOOR_OK)
 *     fprintf(stderr, "%s\n", ipcfloor_last_error(c));
 *   ipcfloor_detach(c);
 *
 * Several series. An engine started with `ipcfloor serve --data ES.f64 --data NQ.csv ...` holds
 * up to 16 series, one per file, in a table: index 0 is the main one (ipcfloor_series, the one
 * live mode appends to), each has a name (ipcfloor_series_key: "ES", "NQ") and its bars
 * (ipcfloor_series_at), and ipcfloor_backtest_on / ipcfloor_sweep_on run on the one they name.
 *
 * Link with -lipcfloor (pkg-config ipcfloor, or CMake's ipcfloor::c). The library exports only
 * ipcfloor_* symbols; its SONAME is libipcfloor.so.<IPCFLOOR_VERSION_MAJOR>.
 *
 * Errors. Every function that can fail returns IPCFLOOR_OK (0) or one of the negative codes
 * below; none aborts, none lets an exception out. The sentence behind the last failure (naming
 * the engine, its pid and the lane) is ipcfloor_last_error(c) for calls on a client and
 * ipcfloor_last_error(NULL) for a failed attach on the calling thread.
 *
 * Live mode. An engine started with `ipcfloor serve --live --capacity N` also takes new bars:
 * one client appends closes (ipcfloor_append), others subscribe combos (ipcfloor_subscribe) and
 * read one ipcfloor_signal per subscribed combo per new bar (ipcfloor_poll_signal, _wait_signal).
 *
 * Threads. A client is one claimed lane: one thread at a time may use it for requests
 * (backtest, sweep, their _on forms, echo, append, subscribe, snapshot) and for reading its
 * signals. The series (each one of the table) and the metadata accessors only read memory that
 * never changes after attach (or, for the published bars and the drop counter, only grows), so
 * any thread may call them concurrently.
 * Attach one client per thread to run requests in parallel (the engine has --lanes of them).
 *
 * Memory. Attach allocates; backtest, sweep (on any series), echo and the live calls never
 * allocate on success and, when the client waits in spin mode, make no system call unless an
 * answer is late by a whole engine heartbeat (ipcfloor_poll_signal never waits at all). The
 * series memory belongs to the engine: never write to it (it may be mapped read-only). */
#ifndef IPCFLOOR_IPCFLOOR_H
#define IPCFLOOR_IPCFLOOR_H

#include <stddef.h>
#include <stdint.h>

#include "strategy.h" /* ipcfloor_trade, IPCFLOOR_COLUMN_* */

#define IPCFLOOR_VERSION_MAJOR 0
#define IPCFLOOR_VERSION_MINOR 2
#define IPCFLOOR_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH, as ipcfloor_version() returns it. */
#define IPCFLOOR_VERSION \
  (IPCFLOOR_VERSION_MAJOR * 10000 + IPCFLOOR_VERSION_MINOR * 100 + IPCFLOOR_VERSION_PATCH)

#if defined(__GNUC__) || defined(__clang__)
#define IPCFLOOR_API __attribute__((visibility("default")))
#else
#define IPCFLOOR_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Codes ------------------------------------------------------------------------------- */

#define IPCFLOOR_OK 0
/* A caller's argument is unusable: a NULL pointer, an invalid segment name, an options struct
 * of an unknown size, a timeout out of its range, a wait mode the engine cannot serve. */
#define IPCFLOOR_E_INVALID (-1)
/* Attach: no live engine serves that name (no segment, or its engine is dead or stopping). */
#define IPCFLOOR_E_NO_ENGINE (-2)
/* Attach: every lane is held by a live client, or the engine stayed too busy to take the hand-off
 * (too many connections open at once) until the timeout. Never means the engine is gone. */
#define IPCFLOOR_E_BUSY (-3)
/* Attach: the segment is not owned by this uid or not mode 0600. */
#define IPCFLOOR_E_PERMISSION (-4)
/* Attach: the segment was built by an engine of another layout version. */
#define IPCFLOOR_E_VERSION (-5)
/* Attach: the object is not an ipcfloor segment, or its header or series is corrupt. */
#define IPCFLOOR_E_BAD_SEGMENT (-6)
/* A call: the engine died or is stopping. Detach; attach again once an engine is back (or attach
 * with options.reconnect, and the client does that itself: then this code means no engine came
 * back within the reconnect limit, or the one that did holds other bars). */
#define IPCFLOOR_E_ENGINE_GONE (-7)
/* A call: the engine lives but its heartbeat stopped (e.g. SIGSTOP); no answer came in time. */
#define IPCFLOOR_E_ENGINE_HUNG (-8)
/* No answer (or no ring space) within the client's timeout while the engine looked alive.
 * The late answer is discarded by the next call on this client. */
#define IPCFLOOR_E_TIMEOUT (-9)
/* The lane's rings hold impossible positions or answered out of order: detach. */
#define IPCFLOOR_E_CORRUPT (-10)
/* Per combo: a window is outside [1, bars] of the engine's series. */
#define IPCFLOOR_E_WINDOW (-11)
/* Per combo: the engine refused the frame for another reason (its status names which). */
#define IPCFLOOR_E_REJECTED (-12)
/* The operating system refused a mapping or file operation. */
#define IPCFLOOR_E_IO (-13)
/* Out of memory, or a host resource is missing. */
#define IPCFLOOR_E_RESOURCE (-14)
/* The library failed in a way its contract does not name (a bug: please report it). */
#define IPCFLOOR_E_INTERNAL (-15)
/* Live calls: the engine was started without --live (no appends, subscriptions or signals). */
#define IPCFLOOR_E_NOT_LIVE (-16)
/* Append: the series already holds its --capacity bars; nothing was overwritten. */
#define IPCFLOOR_E_CAPACITY_FULL (-17)
/* Append: the close is not a finite number > 0. */
#define IPCFLOOR_E_BAD_PRICE (-18)
/* Append: another client is the series' writer (the first client to append keeps the series
 * until it detaches). */
#define IPCFLOOR_E_NOT_WRITER (-19)
/* Subscribe: this client's lane holds as many combos as the engine allows (serve
 * --subscriptions), or their memory is used up. */
#define IPCFLOOR_E_NO_ROOM (-20)
/* Backtest/sweep on a series: the engine holds no series of that index (ipcfloor_series_count
 * says how many it holds). The client stays usable. */
#define IPCFLOOR_E_NO_SUCH_SERIES (-21)
/* A call on a client that another process attached: this process is a child of it (fork()),
 * and a child may not use its parent's lane (it would move the parent's ring positions). Attach
 * again in the child; the parent's lane stays the parent's, untouched. Detaching it in the child
 * only unmaps it there. */
#define IPCFLOOR_E_FORKED (-22)
/* A call: the check installed by ipcfloor_set_interrupt asked it to stop while it waited. The
 * client stays usable: its next call first reads and drops what the stopped call left owed. */
#define IPCFLOOR_E_INTERRUPTED (-23)
/* A strategy index or name the engine does not serve (ipcfloor_strategy, the _with calls). */
#define IPCFLOOR_E_NO_SUCH_STRATEGY (-24)
/* Subscribe: the strategy has no per-bar step, so it cannot stream signals. */
#define IPCFLOOR_E_NO_LIVE_STEP (-25)
/* Snapshot: the lane's signal ring has no room for one signal per subscription; read what waits
 * there first. */
#define IPCFLOOR_E_SIGNALS_FULL (-26)
/* Statistics or a trade list asked of a strategy built against version 1 of the strategy ABI,
 * which reports no trades (its backtests still work). */
#define IPCFLOOR_E_NO_TRADE_REPORT (-27)
/* The strategy needs a column (high, low, open, volume) the series does not have; the sentence
 * names it. */
#define IPCFLOOR_E_MISSING_COLUMN (-28)
/* A bar range outside the series, or of fewer than 2 bars; the sentence gives the series' bars. */
#define IPCFLOOR_E_BAD_RANGE (-29)
/* -30 to -39 are reserved. */
/* A call on a client attached with `reconnect`: its engine went away while the call was in
 * flight, and the client re-attached to the engine that came back under the same name (its
 * subscriptions renewed, a snapshot asked for). The call was not answered and is NOT retried:
 * an append may or may not have been journaled before the crash; ipcfloor_bars says which (the
 * engine's last bar). Send it again if it is still wanted. The client stays usable. */
#define IPCFLOOR_E_ENGINE_RESTARTED (-40)
/* Append: the engine's journal (serve --journal) had no room on its disk for the bar's record,
 * so the bar was not added (nothing was lost: no bar after it was added either). The client
 * stays usable; the append succeeds again once the disk has room. */
#define IPCFLOOR_E_JOURNAL_FULL (-41)
/* Append: the engine's journal could not write or sync the bar's record, so the bar was not
 * added; `ipcfloor status` says why. */
#define IPCFLOOR_E_JOURNAL_FAILED (-42)
/* -43 to -59 are reserved. */
/* Paced append (ipcfloor_append_paced): for the whole of the client's timeout a subscriber's
 * signal ring had no room for this bar's signals; nothing was appended. The client stays usable:
 * call again once the subscriber reads. */
#define IPCFLOOR_E_SUBSCRIBERS_BEHIND (-60)

/* Not a failure: ipcfloor_poll_signal found no signal waiting (it never waits). */
#define IPCFLOOR_NO_SIGNAL 1

/* A fixed English name for a code (IPCFLOOR_NO_SIGNAL included), e.g. "window out of range";
 * "unknown error" for other values. Never NULL; the string is static. */
IPCFLOOR_API const char *ipcfloor_strerror(int err);

/* ---- Version ----------------------------------------------------------------------------- */

/* The library's IPCFLOOR_VERSION, to compare with the header a program was compiled with. */
IPCFLOOR_API uint32_t ipcfloor_version(void);
/* "MAJOR.MINOR.PATCH"; static. */
IPCFLOOR_API const char *ipcfloor_version_string(void);

/* ---- Attach ------------------------------------------------------------------------------ */

typedef struct ipcfloor_client ipcfloor_client;

/* How a client waits for its answers. */
#define IPCFLOOR_WAIT_ENGINE 0  /* whatever the engine serves in (recorded in the segment) */
#define IPCFLOOR_WAIT_SPIN 1    /* PAUSE loop: the lowest latency, one core busy while waiting */
#define IPCFLOOR_WAIT_BACKOFF 2 /* spin, then yield, then short sleeps */
#define IPCFLOOR_WAIT_BLOCK 3   /* futex sleep; needs an engine started with --wait block */

typedef struct ipcfloor_options {
  /* sizeof(ipcfloor_options) as the caller knows it; ipcfloor_options_init sets it. Lets later
   * versions append fields without breaking programs built against this one. */
  uint32_t size;
  /* IPCFLOOR_WAIT_*. Default IPCFLOOR_WAIT_ENGINE. */
  int32_t wait;
  /* Bound on any one wait (a lane being freed at attach, ring space, an answer, a signal),
   * nanoseconds: 0 means the default, 5 s; else 1 to IPCFLOOR_TIMEOUT_MAX_NS. A negative or
   * larger value is refused (IPCFLOOR_E_INVALID). A dead engine is reported sooner, within about
   * one heartbeat. */
  int64_t timeout_ns;
  /* 1: re-attach by itself when the engine goes away (a crash, a restart): the call in flight is
   * answered IPCFLOOR_E_ENGINE_RESTARTED (never retried), the client attaches to the engine that
   * comes back under the same name (pausing 1 ms, doubling up to 50 ms, between tries),
   * subscribes its combos again and asks for a snapshot; ipcfloor_wait_signal goes on waiting
   * across it, and the first signal of each subscription after it carries
   * IPCFLOOR_SIGNAL_RESTART and `missed`. 0 (the default): IPCFLOOR_E_ENGINE_GONE, and the client
   * is done. Any other value is refused (IPCFLOOR_E_INVALID). */
  int32_t reconnect;
  int32_t reserved; /* 0 */
  /* With reconnect: how long one outage may last before the client gives up
   * (IPCFLOOR_E_ENGINE_GONE, saying how long it tried), nanoseconds: 0 means the default, 30 s;
   * else 1 ms to IPCFLOOR_RECONNECT_LIMIT_MAX_NS (one day). */
  int64_t reconnect_limit_ns;
} ipcfloor_options;

/* The longest timeout a client takes: one day, in nanoseconds (the bound `ipcfloor sweep
 * --timeout` has too). */
#define IPCFLOOR_TIMEOUT_MAX_NS INT64_C(86400000000000)
/* The longest reconnect limit: one day, in nanoseconds. */
#define IPCFLOOR_RECONNECT_LIMIT_MAX_NS INT64_C(86400000000000)

/* Fills `options` with the defaults. */
IPCFLOOR_API void ipcfloor_options_init(ipcfloor_options *options);

/* Attaches to the segment of engine NAME (as given to `ipcfloor serve --name`) and claims a
 * free lane, with the default options. Returns NULL on failure and stores the code in *err
 * (err may be NULL); ipcfloor_last_error(NULL) then says why on this thread. Allocates. */
IPCFLOOR_API ipcfloor_client *ipcfloor_attach(const char *name, int *err);
/* The same with options (NULL: the defaults). */
IPCFLOOR_API ipcfloor_client *ipcfloor_attach_with(const char *name, const ipcfloor_options *options, int *err);

/* Hands the lane back to the engine and unmaps the segment; every pointer obtained from the
 * client (series, names) dies with it. NULL is ignored. */
IPCFLOOR_API void ipcfloor_detach(ipcfloor_client *c);

/* ---- The series and its metadata (any thread; never allocate) ---------------------------- */

/* The main series as a BACKTEST sees it now, zero-copy: stores its first bar in *close (when
 * close is not NULL) and returns the number of bars. The rule for every series call: the bars a
 * BACKTEST on that series runs on. On a live engine that is every bar published so far (the
 * preloaded ones, then the appended ones; the count only grows: call again for newer bars), the
 * same as ipcfloor_published_series; otherwise the preloaded bars. Bars are numbered by their
 * 0-based index here, in signals (ipcfloor_signal.bar) and in the CLI. Read-only; valid until
 * ipcfloor_detach. */
IPCFLOOR_API size_t ipcfloor_series(const ipcfloor_client *c, const double **close);
/* The main series' bar count now (the same as ipcfloor_series returns). */
IPCFLOOR_API uint64_t ipcfloor_bars(const ipcfloor_client *c);
/* The fee the engine charges per round trip, percentage points. */
IPCFLOOR_API double ipcfloor_fee(const ipcfloor_client *c);
/* Where the series came from, e.g. "gbm(bars=150000, seed=42)" or a file name; NUL-terminated,
 * valid until detach. */
IPCFLOOR_API const char *ipcfloor_series_name(const ipcfloor_client *c);
/* FNV-1a 64 over the series' bytes, as the engine computed it (and the socket protocol reports). */
IPCFLOOR_API uint64_t ipcfloor_series_checksum(const ipcfloor_client *c);
/* The engine's segment name, its pid, this client's lane, the ring depth (how many requests a
 * sweep keeps in flight) and the wait mode in use (IPCFLOOR_WAIT_SPIN/BACKOFF/BLOCK). */
IPCFLOOR_API const char *ipcfloor_engine_name(const ipcfloor_client *c);
IPCFLOOR_API int32_t ipcfloor_engine_pid(const ipcfloor_client *c);
IPCFLOOR_API uint32_t ipcfloor_lane(const ipcfloor_client *c);
IPCFLOOR_API uint32_t ipcfloor_ring_capacity(const ipcfloor_client *c);
IPCFLOOR_API int32_t ipcfloor_wait_mode(const ipcfloor_client *c);
/* 1 when the engine is live (serve --live: this client has a signal ring), else 0. */
IPCFLOOR_API int ipcfloor_is_live(const ipcfloor_client *c);
/* The room for the series in bars (serve --capacity), preloaded bars included; not live: the
 * preloaded bars. */
IPCFLOOR_API uint64_t ipcfloor_capacity(const ipcfloor_client *c);
/* The bars published so far, zero-copy: the preloaded ones, then (live) the appended ones.
 * Stores the first bar in *close (when close is not NULL) and returns how many are valid now;
 * every bar the count covers is complete. The count only grows, up to ipcfloor_capacity; call
 * again for the newer bars. Read-only; valid until ipcfloor_detach. */
IPCFLOOR_API size_t ipcfloor_published_series(const ipcfloor_client *c, const double **close);
/* How many series the engine holds, 1..16: one per `serve --data` file (1 for a generated
 * series). Index 0 is the main series, the one ipcfloor_series shows. */
IPCFLOOR_API uint32_t ipcfloor_series_count(const ipcfloor_client *c);
/* Series `index`'s name in the table: its file's name without the extension ("ES" for
 * /data/ES.f64, as `ipcfloor sweep --series` names it), or "default" for a generated series.
 * NUL-terminated, valid until detach; NULL when index >= ipcfloor_series_count. (The description
 * of the main series' source is ipcfloor_series_name.) */
IPCFLOOR_API const char *ipcfloor_series_key(const ipcfloor_client *c, uint32_t index);
/* Series `index`'s closes, zero-copy: stores its first bar in *close (when close is not NULL)
 * and returns its bars; index 0 is what ipcfloor_series returns (on a live engine, the published
 * bars), any other index its preloaded bars. Past the table: 0 and *close NULL (a series holds at
 * least one bar). Read-only; valid until ipcfloor_detach. */
IPCFLOOR_API size_t ipcfloor_series_at(const ipcfloor_client *c, uint32_t index, const double **close);
/* Which columns series `index` has: IPCFLOOR_COLUMN_* bits, IPCFLOOR_COLUMN_CLOSE always, and
 * IPCFLOOR_COLUMN_OPEN, _HIGH, _LOW, _VOLUME where its file had them (a CSV header's Open, High,
 * Low, Volume; a structured .npy's fields of those names). 0 past the table. */
IPCFLOOR_API uint32_t ipcfloor_series_columns(const ipcfloor_client *c, uint32_t index);
/* Column `column` (one IPCFLOOR_COLUMN_* bit) of series `index`, zero-copy, as ipcfloor_series_at
 * gives its closes: stores its first value in *values (when values is not NULL) and returns its
 * bars, as many as the closes. 0 and *values NULL when the series lacks the column, when `column`
 * is not exactly one of the bits, or past the table. Read-only (the segment is mapped read-only);
 * valid until ipcfloor_detach. A series with columns besides close never grows: APPEND carries a
 * close alone and is refused on it (IPCFLOOR_E_MISSING_COLUMN). */
IPCFLOOR_API size_t ipcfloor_series_column(const ipcfloor_client *c, uint32_t index, uint32_t column,
                                           const double **values);
/* Where the engine runs, as it published at start: the cpu its serving thread is pinned to (-1
 * when it did not say), and the cpus nearest that one, nearest first (`serve --cpu auto` ranks
 * them by the measured floor matrix of `ipcfloor topology`, otherwise by what the kernel declares:
 * SMT siblings, shared L2, shared L3, the same NUMA node; cpu 0 last). ipcfloor_near_cpus copies
 * up to `capacity` of them into cpus (which may be NULL when capacity is 0) and returns how many
 * the engine published. Any thread; never allocate. */
IPCFLOOR_API int32_t ipcfloor_serving_cpu(const ipcfloor_client *c);
IPCFLOOR_API size_t ipcfloor_near_cpus(const ipcfloor_client *c, int32_t *cpus, size_t capacity);
/* Pins the calling thread to the first of ipcfloor_near_cpus that this process may use and
 * stores it in *cpu (when cpu is not NULL): where a client's round trip to the engine is
 * shortest. Call it once, from the thread that makes the requests, before the first one; several
 * clients calling it get the same cpu (pin the others with ipcfloor_near_cpus' later entries).
 * IPCFLOOR_OK; IPCFLOOR_E_INVALID (c is NULL); IPCFLOOR_E_RESOURCE when the engine published no
 * cpu or none of them can take the thread (a cpuset excludes them), with the cpus tried in
 * ipcfloor_last_error(c). Reads sysfs and makes a system call per cpu tried; allocates. */
IPCFLOOR_API int ipcfloor_pin_near_engine(ipcfloor_client *c, int32_t *cpu);

/* How many times this client re-attached to an engine that came back (options.reconnect): 0
 * until its first engine goes away. The requests' thread (a re-attach moves it); no system call. */
IPCFLOOR_API uint64_t ipcfloor_restarts(const ipcfloor_client *c);

/* Signals this client's lane lost to a full signal ring since the engine started (a subscriber
 * that fell behind): compare with the `dropped` its signals reported, and ask for a snapshot
 * when they differ. Any thread; one relaxed read of shared memory. */
IPCFLOOR_API uint64_t ipcfloor_signals_dropped(const ipcfloor_client *c);

/* ---- Requests (the client's thread; never allocate) -------------------------------------- */

/* One backtest: params are the six windows h, L, s, p3, p2, p, each in [1, bars].
 * Stores the result in *pnl (percentage points, net of fees) and *trades (closed round trips).
 * Returns IPCFLOOR_OK, IPCFLOOR_E_WINDOW or IPCFLOOR_E_REJECTED (the engine refused the combo;
 * the client stays usable), or a lane failure (ENGINE_GONE, ENGINE_HUNG, TIMEOUT, CORRUPT). */
IPCFLOOR_API int ipcfloor_backtest(ipcfloor_client *c, const int64_t params[6], double *pnl, int64_t *trades);

/* n backtests, pipelined: the ring is kept full (up to ipcfloor_ring_capacity requests in
 * flight), so the engine never waits for the next combo. C before C23 warns when an
 * int64_t (*)[6] is passed for the const parameter: build the grid const, or cast. For each i, pnl[i], trades[i] and
 * status[i] (IPCFLOOR_OK or that combo's code; status may be NULL) are filled; a refused combo
 * gets pnl NaN and trades 0 and does not stop the others.
 * Returns the number of combos whose status is not IPCFLOOR_OK (0: all answered), or a negative
 * code when the lane itself failed; then every combo not answered carries that code. */
IPCFLOOR_API int ipcfloor_sweep(ipcfloor_client *c, const int64_t (*params)[6], size_t n, double *pnl,
                                int64_t *trades, int *status);

/* ipcfloor_backtest and ipcfloor_sweep on series `series` of the engine's table (0: the main
 * series, the same as the calls above). Windows are judged against that series' bars: each in
 * [1, ipcfloor_series_at(c, series, NULL)] (series 0 of a live engine: the bars published so
 * far). When the engine holds no such series, nothing is sent: the call returns
 * IPCFLOOR_E_NO_SUCH_SERIES, whose sentence names the index and how many series the engine
 * holds, and a sweep marks every combo with it (pnl NaN, trades 0; also when n is 0); the client
 * stays usable. The client's thread; never allocate. */
IPCFLOOR_API int ipcfloor_backtest_on(ipcfloor_client *c, uint32_t series, const int64_t params[6], double *pnl,
                                      int64_t *trades);
IPCFLOOR_API int ipcfloor_sweep_on(ipcfloor_client *c, uint32_t series, const int64_t (*params)[6], size_t n,
                                   double *pnl, int64_t *trades, int *status);

/* ---- Strategies (any thread for the table; the client's thread for requests) -------------- */

/* The engine serves the built-in HMA/HMA3 strategy (index 0, named "hma") and those it loaded
 * (`ipcfloor serve --strategy FILE.so`, include/ipcfloor/strategy.h), in a table copied at attach.
 * A request names one by its index; look it up by name once. */
/* How many strategies the engine serves, 1..16. */
IPCFLOOR_API uint32_t ipcfloor_strategy_count(const ipcfloor_client *c);
/* The index of the strategy named `name`, or IPCFLOOR_E_NO_SUCH_STRATEGY (its sentence lists the
 * engine's strategies) or IPCFLOOR_E_INVALID. */
IPCFLOOR_API int ipcfloor_strategy_find(ipcfloor_client *c, const char *name);
/* Strategy `index`'s name, how many of a combo's six values it uses (the rest must be 0), the
 * name of its parameter k, the names of the two values its signals carry (NULL without a live
 * step), and whether it can stream signals (1) or not (0). NULL / 0 past the table. Valid until
 * detach. */
IPCFLOOR_API const char *ipcfloor_strategy_name(const ipcfloor_client *c, uint32_t index);
IPCFLOOR_API uint32_t ipcfloor_strategy_param_count(const ipcfloor_client *c, uint32_t index);
IPCFLOOR_API const char *ipcfloor_strategy_param_name(const ipcfloor_client *c, uint32_t index, uint32_t k);
IPCFLOOR_API const char *ipcfloor_strategy_value_name(const ipcfloor_client *c, uint32_t index, uint32_t k);
IPCFLOOR_API int ipcfloor_strategy_is_live(const ipcfloor_client *c, uint32_t index);

/* ipcfloor_backtest_on, ipcfloor_sweep_on and (below) ipcfloor_subscribe on strategy `strategy`
 * (an index from ipcfloor_strategy_find; 0: the built-in one, the same as the calls above). The engine
 * judges the params with that strategy: a refusal is IPCFLOOR_E_WINDOW, whose sentence names
 * the parameter. An index the engine does not serve is IPCFLOOR_E_NO_SUCH_STRATEGY without a
 * request (a sweep marks every combo with it); a subscribe to a strategy without a per-bar step
 * is IPCFLOOR_E_NO_LIVE_STEP. The client's thread; never allocate. */
IPCFLOOR_API int ipcfloor_backtest_with(ipcfloor_client *c, uint32_t strategy, uint32_t series,
                                        const int64_t params[6], double *pnl, int64_t *trades);
IPCFLOOR_API int ipcfloor_sweep_with(ipcfloor_client *c, uint32_t strategy, uint32_t series,
                                     const int64_t (*params)[6], size_t n, double *pnl, int64_t *trades,
                                     int *status);
/* The 48 bytes of `in` travel to the engine and back into `out` untouched (the ECHO opcode):
 * the transport alone, to measure what a request costs before any work. */
IPCFLOOR_API int ipcfloor_echo(ipcfloor_client *c, const int64_t in[6], int64_t out[6]);

/* ---- Requests with options, statistics and trade lists (the client's thread) -------------- */

/* What one request runs on, and with what: the strategy and series by index, a range of the
 * series' bars, the fee, and the bars per year the annualised figures use. ipcfloor_request_init
 * sets every field to "the engine's default": strategy 0, series 0, the whole series (to_bar 0),
 * the engine's fee (NaN) and bars per year (0). */
typedef struct ipcfloor_request {
  uint32_t strategy;    /* index (ipcfloor_strategy_find); 0: the built-in one */
  uint32_t series;      /* index (ipcfloor_series_count); 0: the main series */
  uint64_t from_bar;    /* the bars [from_bar, to_bar) of the series, at least 2 of them; */
  uint64_t to_bar;      /*   to_bar 0: the whole series (from_bar must then be 0 too) */
  double fee;           /* percentage points per round trip, in [0, 100]; NaN: the engine's (serve --fee) */
  double bars_per_year; /* for sharpe, sortino and calmar, > 0; 0: the engine's (serve --bars-per-year) */
} ipcfloor_request;
IPCFLOOR_API void ipcfloor_request_init(ipcfloor_request *request);

/* A backtest's statistics, computed by the engine from the trades its strategy reported and the
 * bars it ran on, the same way for every strategy: docs/STATISTICS.md defines every field (its
 * formula, its operation order, and what it is with no trades or no variance: NaN where a figure
 * has nothing to measure). */
typedef struct ipcfloor_stats {
  double pnl;                /* closed trades, percentage points net of fees (the backtest's pnl) */
  int64_t trades;            /* closed round trips */
  int64_t wins;              /* trades with pnl > 0 */
  double win_rate;           /* wins / trades */
  double profit_factor;      /* gross profit / gross loss (+inf with no loss) */
  double expectancy;         /* pnl / trades: the mean trade */
  double best_trade;
  double worst_trade;
  double avg_win;
  double avg_loss;           /* negative */
  double avg_trade_bars;     /* mean bars a trade is held */
  double exposure;           /* share of bar-to-bar steps in a position */
  double max_drawdown;       /* of the bar-by-bar marked-to-market equity, points */
  int64_t max_drawdown_bars; /* the longest time under water, bars */
  double sharpe;             /* annualised by bars per year */
  double sortino;
  double calmar;
  uint64_t bars;             /* the bars it ran on */
} ipcfloor_stats;

/* Room for one refused combo's reason, NUL included (ipcfloor_sweep_stats, ipcfloor_sweep_request). */
#define IPCFLOOR_REASON_BYTES 128

/* One backtest as `request` says (NULL: the defaults), its statistics into *out.
 * Returns IPCFLOOR_OK, a refusal (IPCFLOOR_E_WINDOW with the strategy's own sentence,
 * IPCFLOOR_E_NO_TRADE_REPORT, IPCFLOOR_E_MISSING_COLUMN, IPCFLOOR_E_BAD_RANGE,
 * IPCFLOOR_E_NO_SUCH_SERIES, IPCFLOOR_E_NO_SUCH_STRATEGY, IPCFLOOR_E_INVALID for a fee or bars
 * per year out of range, IPCFLOOR_E_REJECTED), or a lane failure. Never allocates. */
IPCFLOOR_API int ipcfloor_backtest_stats(ipcfloor_client *c, const ipcfloor_request *request, const int64_t params[6],
                                         ipcfloor_stats *out);
/* n of them, pipelined as ipcfloor_sweep is: out[i] and status[i] (may be NULL) for each combo,
 * and, when reasons is not NULL, a sentence for each refused one (the strategy's own words when it
 * refused the parameters; "" for a combo answered). A refused combo's figures are NaN and its
 * trades 0. Returns the number of combos not answered IPCFLOOR_OK, or a negative code when the
 * lane failed (then every combo not answered carries it). */
IPCFLOOR_API int ipcfloor_sweep_stats(ipcfloor_client *c, const ipcfloor_request *request, const int64_t (*params)[6],
                                      size_t n, ipcfloor_stats *out, int *status, char (*reasons)[IPCFLOOR_REASON_BYTES]);
/* ipcfloor_backtest_with and ipcfloor_sweep_with as `request` says: a range of bars, a fee. */
IPCFLOOR_API int ipcfloor_backtest_request(ipcfloor_client *c, const ipcfloor_request *request, const int64_t params[6],
                                           double *pnl, int64_t *trades);
IPCFLOOR_API int ipcfloor_sweep_request(ipcfloor_client *c, const ipcfloor_request *request,
                                        const int64_t (*params)[6], size_t n, double *pnl, int64_t *trades,
                                        int *status, char (*reasons)[IPCFLOOR_REASON_BYTES]);

/* One combo in full (a trade is include/ipcfloor/strategy.h's ipcfloor_trade; its bars count
 * from the start of the bars it ran on: the request's from_bar is bar 0): its trade list into trades[0..capacity), their number into *count, its
 * statistics into *stats (NULL: not wanted) and, when equity is not NULL, its bar-by-bar
 * marked-to-market equity (docs/STATISTICS.md) into equity[0..bars), bars being the request's
 * range (ipcfloor_trades_bars). The engine sends the list a page at a time through the lane's
 * bulk region. Returns IPCFLOOR_OK; IPCFLOOR_E_RESOURCE when the trades do not fit `capacity`
 * (*count says how many there are: call again with room for them; capacity 0 asks only that) or
 * the engine runs with --bulk-bytes 0; or a refusal or lane failure as ipcfloor_backtest_stats. */
IPCFLOOR_API int ipcfloor_trades(ipcfloor_client *c, const ipcfloor_request *request, const int64_t params[6],
                                 struct ipcfloor_trade *trades, size_t capacity, size_t *count, ipcfloor_stats *stats,
                                 double *equity);
/* The bars `request` runs on (its range, else the whole series): the length of the equity array
 * ipcfloor_trades fills; 0 for a series or range the engine does not hold. */
IPCFLOOR_API uint64_t ipcfloor_trades_bars(const ipcfloor_client *c, const ipcfloor_request *request);

/* ---- Live mode (an engine started with `ipcfloor serve --live`; the client's thread) ------- */

/* ipcfloor_signal.flags */
#define IPCFLOOR_SIGNAL_GAP 1      /* signals of this lane were dropped before this one (see `dropped`) */
#define IPCFLOOR_SIGNAL_SNAPSHOT 2 /* a state asked for (snapshot, subscribe), not a new bar */
#define IPCFLOOR_SIGNAL_RESTART 4  /* the first signal of this subscription since the client
                                    * re-attached to a restarted engine (options.reconnect):
                                    * `missed` bars went by that it did not see as they happened */

/* One subscribed combo's state after one bar, exactly as its strategy's batch run has it after
 * that bar (the same pnl bits and trades as a backtest over the bars up to it). 64 bytes. */
typedef struct ipcfloor_signal {
  uint64_t bar;          /* 0-based index of the bar in the whole series */
  uint32_t subscription; /* the id ipcfloor_subscribe gave the combo (per client) */
  uint32_t dropped;      /* signals of this lane lost before this one, since the last delivered (saturates) */
  double value[2];       /* the strategy's two values (ipcfloor_strategy_value_name; the built-in's:
                          * hma and hma3); NaN while they warm up */
  double pnl;            /* percentage points, net of fees, up to and including this bar */
  int64_t trades;        /* closed round trips up to this bar */
  uint64_t tick;         /* the tick the append of this bar carried; 0 in a snapshot */
  int8_t cross;          /* the signal at this bar: +1 a long entry or reversal (the built-in: HMA3
                          * crossed above HMA), -1 a short one, 0 none */
  int8_t position;       /* after this bar: +1 long, -1 short, 0 flat */
  uint16_t flags;        /* IPCFLOOR_SIGNAL_GAP | IPCFLOOR_SIGNAL_SNAPSHOT | IPCFLOOR_SIGNAL_RESTART */
  uint32_t missed;       /* with IPCFLOOR_SIGNAL_RESTART: the bars this subscription did not see as they
                          * happened while the engine was away (the new engine's bars past the last
                          * one this client had heard of; saturates); else 0 */
} ipcfloor_signal;

/* Appends one close to the engine's series. The first client to append becomes the series' one
 * writer until it detaches. `tick` is any clock reading the subscribers share (e.g.
 * CLOCK_MONOTONIC in ns, or 0): every signal of this bar carries it back. Stores the series' bar
 * count after the append in *bars (bars may be NULL). When the call returns, the signals of this
 * bar are in their subscribers' rings (or, where a ring was full, counted as dropped).
 * On an engine with a journal (serve --journal) the call returns once the bar's record is written
 * under its --fsync policy: a bar is in the series only once it is in the journal.
 * Returns IPCFLOOR_OK, IPCFLOOR_E_CAPACITY_FULL, IPCFLOOR_E_BAD_PRICE, IPCFLOOR_E_NOT_WRITER,
 * IPCFLOOR_E_NOT_LIVE, IPCFLOOR_E_JOURNAL_FULL, IPCFLOOR_E_JOURNAL_FAILED (the client stays usable
 * after each), IPCFLOOR_E_ENGINE_RESTARTED (reconnect: the engine came back; the bar may or may not
 * be in the series: ipcfloor_bars says), or a lane failure. */
IPCFLOOR_API int ipcfloor_append(ipcfloor_client *c, double close, uint64_t tick, uint64_t *bars);

/* ipcfloor_append for a replay that loses no signal: the engine takes the bar only when every
 * subscription's signal fits its subscriber's signal ring now. While one does not, the call asks
 * again (pausing 20 us, doubling to 1 ms; the interrupt check of ipcfloor_set_interrupt is asked
 * between tries) until the client's timeout, then returns IPCFLOOR_E_SUBSCRIBERS_BEHIND with
 * nothing appended; a subscriber that never reads holds the replay back. Its other returns are
 * ipcfloor_append's. `ipcfloor feed --pace-to-subscribers` is this call. */
IPCFLOOR_API int ipcfloor_append_paced(ipcfloor_client *c, double close, uint64_t tick, uint64_t *bars);

/* Subscribes the combo (six windows, each in [1, ipcfloor_capacity]) on this client's lane: from
 * now on every new bar brings one ipcfloor_signal for it. The engine first replays the bars so
 * far. Stores the combo's id (0, 1, ... per client) in *id and, when state is not NULL, its state
 * after the bars so far: bar, subscription, pnl, trades and position, flags
 * IPCFLOOR_SIGNAL_SNAPSHOT, value[0] and value[1] NaN (the answer does not carry them; a snapshot does),
 * cross, tick and dropped 0. Subscriptions last until the client detaches.
 * Returns IPCFLOOR_OK, IPCFLOOR_E_WINDOW, IPCFLOOR_E_NO_ROOM, IPCFLOOR_E_REJECTED (the replay
 * would cost more than the engine's bound per frame, serve --max-frame-ms), IPCFLOOR_E_NOT_LIVE,
 * or a lane failure. */
IPCFLOOR_API int ipcfloor_subscribe(ipcfloor_client *c, const int64_t params[6], uint32_t *id,
                                    ipcfloor_signal *state);
/* The same on strategy `strategy` (see ipcfloor_backtest_with); IPCFLOOR_E_NO_LIVE_STEP when that
 * strategy has no per-bar step. */
IPCFLOOR_API int ipcfloor_subscribe_with(ipcfloor_client *c, uint32_t strategy, const int64_t params[6],
                                         uint32_t *id, ipcfloor_signal *state);

/* Asks for one signal per subscription of this client with its state now, flagged
 * IPCFLOOR_SIGNAL_SNAPSHOT: how a subscriber that saw IPCFLOOR_SIGNAL_GAP (or a growing
 * ipcfloor_signals_dropped) re-synchronises. Returns the number of subscriptions (>= 0), or
 * IPCFLOOR_E_NOT_LIVE or a lane failure. */
IPCFLOOR_API int ipcfloor_snapshot(ipcfloor_client *c);

/* The next signal of this client's lane, without waiting: IPCFLOOR_OK (stored in *out),
 * IPCFLOOR_NO_SIGNAL (nothing yet; *out untouched; not an error, the last error stays),
 * IPCFLOOR_E_NOT_LIVE, IPCFLOOR_E_CORRUPT or IPCFLOOR_E_INVALID. No system call, so it does
 * not notice an engine that died (nothing more comes): ipcfloor_wait_signal does. */
IPCFLOOR_API int ipcfloor_poll_signal(ipcfloor_client *c, ipcfloor_signal *out);

/* The same, waiting up to the client's timeout (ipcfloor_options.timeout_ns) for one. With
 * reconnect, an engine that goes away meanwhile is waited for (up to the reconnect limit) and
 * the wait goes on with the engine that came back: the next signals are the snapshot's, flagged
 * IPCFLOOR_SIGNAL_RESTART. Returns IPCFLOOR_OK,
 * IPCFLOOR_E_TIMEOUT (no signal came; the engine looked alive), IPCFLOOR_E_ENGINE_GONE,
 * IPCFLOOR_E_ENGINE_HUNG, IPCFLOOR_E_CORRUPT, IPCFLOOR_E_NOT_LIVE or IPCFLOOR_E_INVALID. */
IPCFLOOR_API int ipcfloor_wait_signal(ipcfloor_client *c, ipcfloor_signal *out);

/* ---- Interrupts and fork (the client's thread) ------------------------------------------ */

/* Asked by a waiting call; nonzero stops it. Runs on the calling thread, inside the call. */
typedef int (*ipcfloor_interrupt_fn)(void *context);

/* Installs `check` on client c (NULL removes it): while a call on c waits (for an answer, ring
 * space or a signal) it asks check(context) about every interval_ns of waiting, and a sweep asks
 * it too between answers once interval_ns has passed since it last asked; when check returns
 * nonzero, the call returns IPCFLOOR_E_INTERRUPTED at once (a sweep marks the combos not
 * answered with it). This is how a binding lets Ctrl-C stop a long wait or sweep: the Python
 * package checks its signal handlers here. interval_ns is 1 ms to 1 s. The client stays usable:
 * its next call first reads and drops the answers the stopped call left owed (each wait bounded
 * by the timeout). Returns IPCFLOOR_OK or IPCFLOOR_E_INVALID. Never allocates.
 *
 * Fork. A client belongs to the process that attached it. In a child made by fork() every call
 * on an inherited client returns IPCFLOOR_E_FORKED before it touches the lane (the accessors
 * still read the mapping), and ipcfloor_detach there unmaps without handing the parent's lane
 * back. The check is a counter that a pthread_atfork handler increments: no system call. */
IPCFLOOR_API int ipcfloor_set_interrupt(ipcfloor_client *c, ipcfloor_interrupt_fn check, void *context,
                                        int64_t interval_ns);

/* ---- Helpers ----------------------------------------------------------------------------- */

/* The six windows users derive from one length L (the engine's CLI does the same): round half to
 * even, each at least 1: h = p = round(L/2), s = round(sqrt(L)), p3 = round(p/3), p2 = round(p/2).
 * Returns IPCFLOOR_E_INVALID for length < 1. */
IPCFLOOR_API int ipcfloor_combo_from_length(int64_t length, int64_t params[6]);

/* The directory ipcfloor_attach looks in for engine NAME's socket, by the rule every ipcfloor
 * command follows: $IPCFLOOR_SOCKET_DIR when it is set and not empty, else
 * $XDG_RUNTIME_DIR/ipcfloor, else /dev/shm/ipcfloor-UID (both private to the user, so no other
 * user can squat a name or swap two engines' sockets). Copies it, NUL-terminated and cut to fit,
 * into buf (size bytes; buf may be NULL when size is 0) and returns its length without the NUL,
 * as snprintf does: a return of size or more means buf was too small. Reads the environment. */
IPCFLOOR_API size_t ipcfloor_default_socket_dir(char *buf, size_t size);

/* The sentence behind the last failure on client c (empty when there was none), or with c NULL
 * the calling thread's last failed attach. Valid until the next call on the same client (or the
 * next attach on the same thread). */
IPCFLOOR_API const char *ipcfloor_last_error(const ipcfloor_client *c);

#ifdef __cplusplus
}
#endif

#endif /* IPCFLOOR_IPCFLOOR_H */
