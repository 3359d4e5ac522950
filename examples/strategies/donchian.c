/* A Donchian channel breakout with a channel stop, written as a researcher would write a strategy
 * for ipcfloor (include/ipcfloor/strategy.h). It needs highs and lows: the channels are the
 * highest high and the lowest low of the bars before bar i. At bar i:
 *   - a long position whose close falls below the lowest low of the previous `exit` bars is
 *     closed (the stop), as is a short one whose close rises above their highest high;
 *   - then a close above the highest high of the previous `entry` bars goes long (closing a
 *     short), and one below their lowest low goes short (closing a long).
 * Each closed trade counts its return in percentage points, net of the fee, and is reported to
 * the engine's sink; a position still open at the end is not closed. Every channel is a max or a
 * min: exact, whatever the order, so the numpy reference (tools/reference/donchian.py) gives the
 * same bits.
 *
 * Build: ipcfloor_add_strategy(donchian SOURCES donchian.c) in CMake, or
 *   cc -O2 -shared -fPIC -ffp-contract=off $(pkg-config --cflags ipcfloor) donchian.c -o donchian.so
 * Serve it on a series with High and Low columns: ipcfloor serve --data prices.csv --strategy ./donchian.so */
#include <ipcfloor/strategy.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>

enum { ENTRY = 0, EXIT = 1 };

static int donchian_validate(const int64_t* p, uint64_t n_bars, char* why, size_t why_bytes) {
  for (int k = ENTRY; k <= EXIT; ++k) {
    if (p[k] >= 1 && (uint64_t)p[k] < n_bars) continue;
    if (why) snprintf(why, why_bytes, "%s is %lld, outside [1, %llu] (the bars of the series, less one)",
                      k == ENTRY ? "entry" : "exit", (long long)p[k], (unsigned long long)(n_bars - 1));
    return 1 + k;
  }
  return 0;
}

/* Per bar: a look at the previous entry and exit bars' highs and lows. */
static uint64_t donchian_cost(const int64_t* p, uint64_t n_bars) {
  const uint64_t per_bar = 2 * ((uint64_t)p[ENTRY] + (uint64_t)p[EXIT]) + 1;
  return n_bars != 0 && per_bar > UINT64_MAX / n_bars ? UINT64_MAX : per_bar * n_bars;
}

static uint64_t donchian_workspace_bytes(uint64_t n_bars) {
  (void)n_bars;
  return 0;
}

/* The highest high and the lowest low of the n bars before bar i (i >= n). */
static void channel(const ipcfloor_columns* b, uint64_t i, int64_t n, double* high, double* low) {
  double h = b->high[i - (uint64_t)n];
  double l = b->low[i - (uint64_t)n];
  for (uint64_t j = i - (uint64_t)n + 1; j < i; ++j) {
    if (b->high[j] > h) h = b->high[j];
    if (b->low[j] < l) l = b->low[j];
  }
  *high = h;
  *low = l;
}

typedef struct trading {
  int position;
  double entry;
  uint64_t entry_bar;
  double pnl;
  int64_t trades;
} trading;

static void close_trade(trading* t, const ipcfloor_trade_sink* sink, double price, uint64_t i, double fee) {
  const double pnl = (t->position == 1 ? price / t->entry - 1.0 : t->entry / price - 1.0) * 100.0 - fee;
  t->pnl += pnl;
  t->trades += 1;
  ipcfloor_report_trade(sink, t->entry_bar, i, t->position, t->entry, price, pnl);
  t->position = 0;
}

static void open_trade(trading* t, int side, double price, uint64_t i) {
  t->position = side;
  t->entry = price;
  t->entry_bar = i;
}

/* Bar i (i >= 1) of the rules above; returns the signal (+1 went long, -1 went short, 0 none) and
 * stores the entry channel in *high and *low (NaN before it fills). */
static int bar(trading* t, const ipcfloor_trade_sink* sink, const ipcfloor_columns* b, uint64_t i, const int64_t* p,
               double fee, double* high, double* low) {
  const double price = b->close[i];
  if (t->position != 0 && i >= (uint64_t)p[EXIT]) {
    double exit_high, exit_low;
    channel(b, i, p[EXIT], &exit_high, &exit_low);
    if ((t->position == 1 && price < exit_low) || (t->position == -1 && price > exit_high))
      close_trade(t, sink, price, i, fee);
  }
  *high = NAN;
  *low = NAN;
  if (i < (uint64_t)p[ENTRY]) return 0;
  channel(b, i, p[ENTRY], high, low);
  if (price > *high && t->position != 1) {
    if (t->position == -1) close_trade(t, sink, price, i, fee);
    open_trade(t, 1, price, i);
    return 1;
  }
  if (price < *low && t->position != -1) {
    if (t->position == 1) close_trade(t, sink, price, i, fee);
    open_trade(t, -1, price, i);
    return -1;
  }
  return 0;
}

static int donchian_run(const ipcfloor_columns* bars, const int64_t* p, double fee, void* workspace,
                        const ipcfloor_trade_sink* sink, ipcfloor_strategy_result* out) {
  (void)workspace;
  trading t = {0, 0.0, 0, 0.0, 0};
  double high, low;
  for (uint64_t i = 1; i < bars->n_bars; ++i) (void)bar(&t, sink, bars, i, p, fee, &high, &low);
  out->pnl = t.pnl;
  out->trades = t.trades;
  return 0;
}

/* ---- Live: the channels read the series so far, so the state is the trading alone -------------- */

typedef struct live_state {
  int64_t params[2];
  double fee;
  trading t;
} live_state;

static uint64_t donchian_state_bytes(const int64_t* p) {
  (void)p;
  return sizeof(live_state);
}

static void donchian_init(void* state, const int64_t* p, double fee) {
  live_state* s = (live_state*)state;
  s->params[ENTRY] = p[ENTRY];
  s->params[EXIT] = p[EXIT];
  s->fee = fee;
  s->t = (trading){0, 0.0, 0, 0.0, 0};
}

static void donchian_step(void* state, const ipcfloor_columns* bars, ipcfloor_strategy_bar* out) {
  live_state* s = (live_state*)state;
  double high = NAN, low = NAN;
  const uint64_t n = bars->n_bars;
  const int signal = n >= 2 ? bar(&s->t, NULL, bars, n - 1, s->params, s->fee, &high, &low) : 0;
  out->value[0] = high;
  out->value[1] = low;
  out->pnl = s->t.pnl;
  out->trades = s->t.trades;
  out->signal = signal;
  out->position = s->t.position;
}

static uint64_t donchian_step_cost(const int64_t* p) { return 2 * ((uint64_t)p[ENTRY] + (uint64_t)p[EXIT]) + 1; }

static const ipcfloor_strategy kDonchian = {
    .abi_version = IPCFLOOR_STRATEGY_ABI_VERSION,
    .struct_size = sizeof(ipcfloor_strategy),
    .name = "donchian",
    .param_count = 2,
    .required_columns = IPCFLOOR_COLUMN_HIGH | IPCFLOOR_COLUMN_LOW,
    .param_names = {"entry", "exit"},
    .example_params = {20, 10},
    .validate = donchian_validate,
    .cost = donchian_cost,
    .workspace_bytes = donchian_workspace_bytes,
    .run = donchian_run,
    .value_names = {"upper", "lower"},
    .state_bytes = donchian_state_bytes,
    .init = donchian_init,
    .step = donchian_step,
    .step_cost = donchian_step_cost,
};

IPCFLOOR_STRATEGY_EXPORT const ipcfloor_strategy* ipcfloor_strategy_v2(void) { return &kDonchian; }
