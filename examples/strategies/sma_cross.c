/* An SMA crossover with stop-and-reverse, written as a researcher would write a strategy for
 * ipcfloor (include/ipcfloor/strategy.h): long when the fast simple moving average crosses above
 * the slow one, short when it crosses below, each reversal closing the open trade at that bar's
 * close, net of the fee. A position still open at the end is not closed. Each closed trade is
 * reported to the engine's sink, so the engine computes its statistics (docs/STATISTICS.md).
 *
 * The averages come from one running sum of the closes, summed from the first bar in order, so
 * every value is exactly what numpy's cumsum gives (tools/reference/sma_cross.py):
 *   sum[i] = sum[i-1] + close[i];  sma_n[i] = (sum[i] - sum[i-n]) / n  (sum[-1] = 0), NaN for i < n-1.
 *
 * Build: ipcfloor_add_strategy(sma_cross SOURCES sma_cross.c) in CMake, or
 *   cc -O2 -shared -fPIC -ffp-contract=off $(pkg-config --cflags ipcfloor) sma_cross.c -o sma_cross.so
 * Load:  ipcfloor serve --strategy ./sma_cross.so       Sweep: ipcfloor sweep --name ipcfloor --strategy sma_cross ... */
#include <ipcfloor/strategy.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>

enum { FAST = 0, SLOW = 1 };

static int sma_validate(const int64_t* p, uint64_t n_bars, char* why, size_t why_bytes) {
  if (p[FAST] < 1 || (uint64_t)p[FAST] > n_bars) {
    if (why) snprintf(why, why_bytes, "fast is %lld, outside [1, %llu] (the bars of the series)", (long long)p[FAST],
                      (unsigned long long)n_bars);
    return 1 + FAST;
  }
  if (p[SLOW] <= p[FAST] || (uint64_t)p[SLOW] > n_bars) {
    if (why) snprintf(why, why_bytes, "slow is %lld; it must be above fast (%lld) and at most %llu (the bars)",
                      (long long)p[SLOW], (long long)p[FAST], (unsigned long long)n_bars);
    return 1 + SLOW;
  }
  return 0;
}

/* Per bar: one add for the running sum, two subtractions and two divisions for the averages. */
static uint64_t sma_cost(const int64_t* p, uint64_t n_bars) {
  (void)p;
  return n_bars > UINT64_MAX / 5 ? UINT64_MAX : 5 * n_bars;
}

static uint64_t sma_workspace_bytes(uint64_t n_bars) { return n_bars * sizeof(double); }

/* The average of the n closes ending at bar i, from the running sums; NaN before the window fills. */
static double sma_at(const double* sum, uint64_t i, int64_t n) {
  if (i + 1 < (uint64_t)n) return NAN;
  const double before = i + 1 == (uint64_t)n ? 0.0 : sum[i - (uint64_t)n];
  return (sum[i] - before) / (double)n;
}

/* Stop-and-reverse on a crossing at bar i: the same bookkeeping the batch run and the live step share. */
typedef struct trading {
  int position;
  double entry;
  uint64_t entry_bar;
  double pnl;
  int64_t trades;
} trading;

/* Closes the open trade at bar i: its pnl is added, and reported as that very value. */
static void close_trade(trading* t, const ipcfloor_trade_sink* sink, double price, uint64_t i, double fee) {
  const double gain = t->position == 1 ? price / t->entry - 1.0 : t->entry / price - 1.0;
  const double pnl = gain * 100.0 - fee;
  t->pnl += pnl;
  t->trades += 1;
  ipcfloor_report_trade(sink, t->entry_bar, i, t->position, t->entry, price, pnl);
}

static int trade(trading* t, const ipcfloor_trade_sink* sink, double fast_prev, double slow_prev, double fast,
                 double slow, double price, uint64_t i, double fee) {
  int side = 0;
  if (fast_prev <= slow_prev && fast > slow) side = 1; /* crosses above: any NaN makes this false */
  else if (fast_prev >= slow_prev && fast < slow) side = -1;
  if (side == 0) return 0;
  if (t->position == -side) close_trade(t, sink, price, i, fee);
  if (t->position != side) {
    t->position = side;
    t->entry = price;
    t->entry_bar = i;
  }
  return side;
}

static int sma_run(const ipcfloor_columns* bars, const int64_t* p, double fee, void* workspace,
                   const ipcfloor_trade_sink* sink, ipcfloor_strategy_result* out) {
  const double* close = bars->close;
  const uint64_t n = bars->n_bars;
  double* sum = (double*)workspace;
  double running = 0.0;
  for (uint64_t i = 0; i < n; ++i) {
    running += close[i];
    sum[i] = running;
  }
  trading t = {0, 0.0, 0, 0.0, 0};
  double fast_prev = sma_at(sum, 0, p[FAST]);
  double slow_prev = sma_at(sum, 0, p[SLOW]);
  for (uint64_t i = 1; i < n; ++i) {
    const double fast = sma_at(sum, i, p[FAST]);
    const double slow = sma_at(sum, i, p[SLOW]);
    (void)trade(&t, sink, fast_prev, slow_prev, fast, slow, close[i], i, fee);
    fast_prev = fast;
    slow_prev = slow;
  }
  out->pnl = t.pnl;
  out->trades = t.trades;
  return 0;
}

/* ---- Live: the running sums of the last slow + 1 bars in a ring, and the trading state ---------- */

typedef struct live_state {
  int64_t fast, slow;
  double fee;
  uint64_t bars;    /* bars seen */
  double running;   /* the running sum through the last bar */
  double fast_prev, slow_prev;
  trading t;
  double ring[];    /* sum[i] at ring[i % (slow + 1)] */
} live_state;

static uint64_t sma_state_bytes(const int64_t* p) { return sizeof(live_state) + (uint64_t)(p[SLOW] + 1) * sizeof(double); }

static void sma_init(void* state, const int64_t* p, double fee) {
  live_state* s = (live_state*)state;
  s->fast = p[FAST];
  s->slow = p[SLOW];
  s->fee = fee;
  s->bars = 0;
  s->running = 0.0;
  s->fast_prev = NAN;
  s->slow_prev = NAN;
  s->t = (trading){0, 0.0, 0, 0.0, 0};
}

/* The average of the n sums ending at bar i, as sma_at computes it, from the ring. */
static double ring_sma(const live_state* s, uint64_t i, int64_t n) {
  if (i + 1 < (uint64_t)n) return NAN;
  const uint64_t size = (uint64_t)s->slow + 1;
  const double before = i + 1 == (uint64_t)n ? 0.0 : s->ring[(i - (uint64_t)n) % size];
  return (s->ring[i % size] - before) / (double)n;
}

static void sma_step(void* state, const ipcfloor_columns* bars, ipcfloor_strategy_bar* out) {
  live_state* s = (live_state*)state;
  const double* close = bars->close;
  const uint64_t i = bars->n_bars - 1;
  s->running += close[i];
  s->ring[i % ((uint64_t)s->slow + 1)] = s->running;
  const double fast = ring_sma(s, i, s->fast);
  const double slow = ring_sma(s, i, s->slow);
  int signal = 0;
  if (i > 0) signal = trade(&s->t, NULL, s->fast_prev, s->slow_prev, fast, slow, close[i], i, s->fee);
  s->fast_prev = fast;
  s->slow_prev = slow;
  s->bars = bars->n_bars;
  out->value[0] = fast;
  out->value[1] = slow;
  out->pnl = s->t.pnl;
  out->trades = s->t.trades;
  out->signal = signal;
  out->position = s->t.position;
}

static uint64_t sma_step_cost(const int64_t* p) {
  (void)p;
  return 5;
}

static const ipcfloor_strategy kSmaCross = {
    .abi_version = IPCFLOOR_STRATEGY_ABI_VERSION,
    .struct_size = sizeof(ipcfloor_strategy),
    .name = "sma_cross",
    .param_count = 2,
    .required_columns = 0, /* closes only */
    .param_names = {"fast", "slow"},
    .example_params = {10, 40},
    .validate = sma_validate,
    .cost = sma_cost,
    .workspace_bytes = sma_workspace_bytes,
    .run = sma_run,
    .value_names = {"fast_sma", "slow_sma"},
    .state_bytes = sma_state_bytes,
    .init = sma_init,
    .step = sma_step,
    .step_cost = sma_step_cost,
};

IPCFLOOR_STRATEGY_EXPORT const ipcfloor_strategy* ipcfloor_strategy_v2(void) { return &kSmaCross; }
