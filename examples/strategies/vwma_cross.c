/* A volume-weighted moving-average crossover with stop-and-reverse, written as a researcher would
 * write a strategy for ipcfloor (include/ipcfloor/strategy.h). It needs volumes: the average of
 * the last n closes, each weighted by its bar's volume,
 *   vwma_n[i] = (pv[i] - pv[i-n]) / (v[i] - v[i-n]),   pv = running sum of close*volume, v = of volume
 * (pv[-1] = v[-1] = 0; NaN for i < n-1, and NaN where the window traded no volume, which makes every
 * comparison false). Long when the fast VWMA crosses above the slow one, short when it crosses
 * below, each reversal closing the open trade at that bar's close, net of the fee, and reporting
 * it to the engine's sink. A position still open at the end is not closed.
 *
 * The running sums are summed from the first bar in order, so every value is what numpy's cumsum
 * gives (tools/reference/vwma_cross.py), bit for bit.
 *
 * Build: ipcfloor_add_strategy(vwma_cross SOURCES vwma_cross.c) in CMake.
 * Serve it on a series with a Volume column: ipcfloor serve --data prices.csv --strategy ./vwma_cross.so */
#include <ipcfloor/strategy.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>

enum { FAST = 0, SLOW = 1 };

static int vwma_validate(const int64_t* p, uint64_t n_bars, char* why, size_t why_bytes) {
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

/* Per bar: a multiply and two adds for the running sums, four subtractions and two divisions. */
static uint64_t vwma_cost(const int64_t* p, uint64_t n_bars) {
  (void)p;
  return n_bars > UINT64_MAX / 9 ? UINT64_MAX : 9 * n_bars;
}

/* The two running sums. */
static uint64_t vwma_workspace_bytes(uint64_t n_bars) { return 2 * n_bars * sizeof(double); }

static double vwma_at(const double* pv, const double* v, uint64_t i, int64_t n) {
  if (i + 1 < (uint64_t)n) return NAN;
  const int first = i + 1 == (uint64_t)n;
  const double pv_before = first ? 0.0 : pv[i - (uint64_t)n];
  const double v_before = first ? 0.0 : v[i - (uint64_t)n];
  return (pv[i] - pv_before) / (v[i] - v_before);
}

typedef struct trading {
  int position;
  double entry;
  uint64_t entry_bar;
  double pnl;
  int64_t trades;
} trading;

static void reverse(trading* t, const ipcfloor_trade_sink* sink, int side, double price, uint64_t i, double fee) {
  if (t->position == -side) {
    const double pnl = (t->position == 1 ? price / t->entry - 1.0 : t->entry / price - 1.0) * 100.0 - fee;
    t->pnl += pnl;
    t->trades += 1;
    ipcfloor_report_trade(sink, t->entry_bar, i, t->position, t->entry, price, pnl);
  }
  if (t->position != side) {
    t->position = side;
    t->entry = price;
    t->entry_bar = i;
  }
}

static int vwma_run(const ipcfloor_columns* bars, const int64_t* p, double fee, void* workspace,
                    const ipcfloor_trade_sink* sink, ipcfloor_strategy_result* out) {
  const uint64_t n = bars->n_bars;
  double* pv = (double*)workspace;
  double* v = pv + n;
  double running_pv = 0.0, running_v = 0.0;
  for (uint64_t i = 0; i < n; ++i) {
    running_pv += bars->close[i] * bars->volume[i];
    running_v += bars->volume[i];
    pv[i] = running_pv;
    v[i] = running_v;
  }
  trading t = {0, 0.0, 0, 0.0, 0};
  double fast_prev = vwma_at(pv, v, 0, p[FAST]);
  double slow_prev = vwma_at(pv, v, 0, p[SLOW]);
  for (uint64_t i = 1; i < n; ++i) {
    const double fast = vwma_at(pv, v, i, p[FAST]);
    const double slow = vwma_at(pv, v, i, p[SLOW]);
    if (fast_prev <= slow_prev && fast > slow) reverse(&t, sink, 1, bars->close[i], i, fee);
    else if (fast_prev >= slow_prev && fast < slow) reverse(&t, sink, -1, bars->close[i], i, fee);
    fast_prev = fast;
    slow_prev = slow;
  }
  out->pnl = t.pnl;
  out->trades = t.trades;
  return 0;
}

static const ipcfloor_strategy kVwmaCross = {
    .abi_version = IPCFLOOR_STRATEGY_ABI_VERSION,
    .struct_size = sizeof(ipcfloor_strategy),
    .name = "vwma_cross",
    .param_count = 2,
    .required_columns = IPCFLOOR_COLUMN_VOLUME,
    .param_names = {"fast", "slow"},
    .example_params = {10, 40},
    .validate = vwma_validate,
    .cost = vwma_cost,
    .workspace_bytes = vwma_workspace_bytes,
    .run = vwma_run,
    /* no live part: it can be swept and asked for statistics, not streamed */
};

IPCFLOOR_STRATEGY_EXPORT const ipcfloor_strategy* ipcfloor_strategy_v2(void) { return &kVwmaCross; }
