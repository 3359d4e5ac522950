/* A strategy for the engine's tests (tests/test_strategies.cpp), built several times with one
 * fault each (PROBE_* definitions, tests/CMakeLists.txt): every refusal `serve --strategy` makes at
 * load, and the answers the engine must still guard (a NaN pnl, negative trades) at run time.
 * It is a version-1 strategy, built against the version-1 header (strategy_v1.h, as it shipped):
 * the proof that old files keep loading, answering BACKTEST, and STATS with no_trade_report.
 *
 * The sound build, "probe": one parameter `step` in [1, 1000]; after bar i its pnl is
 * (close[i] - close[0]) / step and its trades (i + 1) / step, so a batch run and the live step
 * agree bit for bit and every answer can be checked from the series alone. step 13 answers a NaN
 * pnl and step 14 negative trades: the engine must answer those engine_error. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, O_CLOEXEC: the faulty builds only */
#include "strategy_v1.h"


#include <math.h>
#include <stdint.h>
#include <stdio.h>

#ifndef PROBE_NAME
#define PROBE_NAME "probe"
#endif
#ifndef PROBE_ABI
#define PROBE_ABI IPCFLOOR_STRATEGY_ABI_VERSION
#endif
#ifndef PROBE_SIZE_DELTA
#define PROBE_SIZE_DELTA 0
#endif
#ifndef PROBE_ENTRY
#define PROBE_ENTRY ipcfloor_strategy_v1
#endif

#ifdef PROBE_CONSTRUCTOR
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
/* Runs when the file is loaded: creates $IPCFLOOR_PROBE_MARKER, so a test sees whether the engine
 * ran any code of a file it then refused. */
__attribute__((constructor)) static void probe_constructor(void) {
  const char* marker = getenv("IPCFLOOR_PROBE_MARKER");
  if (marker != NULL) {
    const int fd = open(marker, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
  }
}
#endif

#if defined(PROBE_SPIN_MS) || defined(PROBE_SPIN_STEP_MS)
#include <time.h>
/* The fault: run() takes `ms` ms whatever its cost says (2 units a bar): always (PROBE_SPIN_MS),
 * or only for step 99 (PROBE_SPIN_STEP_MS), which the self-check never runs. */
static void probe_spin(long ms) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}
#endif

static int probe_validate(const int64_t* p, uint64_t n_bars, char* why, size_t why_bytes) {
  (void)n_bars;
#ifdef PROBE_LIAR_BOUNDS
  /* The fault: only INT64_MIN and INT64_MAX are refused, while the cost grows with |step|. */
  if (p[0] == INT64_MIN || p[0] == INT64_MAX) {
    if (why) snprintf(why, why_bytes, "step is %lld", (long long)p[0]);
    return 1;
  }
  return 0;
#endif
#ifdef PROBE_UNBOUNDED
  const int64_t top = INT64_MAX; /* the fault: no upper bound on the work a request may ask for */
#else
  const int64_t top = 1000;
#endif
  if (p[0] < 1 || p[0] > top) {
    if (why) snprintf(why, why_bytes, "step is %lld, outside [1, 1000]", (long long)p[0]);
    return 1;
  }
  return 0;
}

static uint64_t probe_cost(const int64_t* p, uint64_t n_bars) {
  (void)p;
#ifdef PROBE_LIAR_BOUNDS
  const uint64_t magnitude = p[0] < 0 ? (uint64_t)(-(p[0] + 1)) + 1 : (uint64_t)p[0];
  return n_bars != 0 && magnitude > UINT64_MAX / n_bars ? UINT64_MAX : magnitude * n_bars;
#endif
#ifdef PROBE_COST_MAX
  (void)n_bars;
  return UINT64_MAX; /* the fault: a cost that is not a finite number of units */
#else
  return n_bars > UINT64_MAX / 2 ? UINT64_MAX : 2 * n_bars;
#endif
}

static uint64_t probe_workspace_bytes(uint64_t n_bars) {
  (void)n_bars;
  return 64;
}

static void probe_at(const double* close, uint64_t i, int64_t step, double* pnl, int64_t* trades) {
  *pnl = (close[i] - close[0]) / (double)step;
  *trades = (int64_t)(i + 1) / step;
#ifdef PROBE_SELF_NAN
  *pnl = NAN; /* the fault: every pnl not finite, the self-check's own example included */
#endif
  if (step == 13) *pnl = NAN;
  if (step == 14) *trades = -1;
}

static int probe_run(const double* close, uint64_t n_bars, const int64_t* p, double fee, void* workspace,
                     ipcfloor_strategy_result* out) {
  (void)fee;
  (void)workspace;
#ifdef PROBE_SPIN_MS
  probe_spin(PROBE_SPIN_MS);
#endif
#ifdef PROBE_SPIN_STEP_MS
  if (p[0] == 99) probe_spin(PROBE_SPIN_STEP_MS);
#endif
  probe_at(close, n_bars - 1, p[0], &out->pnl, &out->trades);
  return 0;
}

typedef struct probe_state {
  int64_t step;
} probe_state;

static uint64_t probe_state_bytes(const int64_t* p) {
  (void)p;
  return sizeof(probe_state);
}

static void probe_init(void* state, const int64_t* p, double fee) {
  (void)fee;
  ((probe_state*)state)->step = p[0];
}

static void probe_step(void* state, const double* close, uint64_t n_bars, ipcfloor_strategy_bar* out) {
  const int64_t step = ((const probe_state*)state)->step;
  probe_at(close, n_bars - 1, step, &out->pnl, &out->trades);
  out->value[0] = close[n_bars - 1];
  out->value[1] = close[0];
  out->signal = 0;
  out->position = 0;
}

static uint64_t probe_step_cost(const int64_t* p) {
  (void)p;
  return 2;
}

static const ipcfloor_strategy kProbe = {
    PROBE_ABI,
    (uint32_t)(sizeof(ipcfloor_strategy) + PROBE_SIZE_DELTA),
    PROBE_NAME,
    1,
    {"step", NULL, NULL, NULL, NULL, NULL},
    {10, 0, 0, 0, 0, 0},
    probe_validate,
    probe_cost,
    probe_workspace_bytes,
    probe_run,
#ifdef PROBE_NO_LIVE
    {NULL, NULL},
    NULL,
    NULL,
    NULL,
    NULL,
#else
    {"close", "first"},
    probe_state_bytes,
    probe_init,
    probe_step,
    probe_step_cost,
#endif
};

IPCFLOOR_STRATEGY_EXPORT const ipcfloor_strategy* PROBE_ENTRY(void) { return &kProbe; }
