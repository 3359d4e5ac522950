/* A version-2 strategy for the tests whose trades are known from the series alone, so every
 * statistic can be checked by hand and by the numpy reference (tools/reference/stats.py): one
 * parameter `hold` in [1, 100000]. It goes long at bar 0 and, every `hold` bars, closes the trade
 * at that bar's close and opens the next one there (stop-and-reverse into the same side): trade k
 * runs from bar k*hold to (k+1)*hold. With n - 1 a multiple of hold every bar is in a position;
 * with hold >= n there is no trade.
 *
 * Faults, one per build (tests/CMakeLists.txt): TRADE_PROBE_NEEDS_HIGH requires the high column
 * (and reads it: the series must have it); TRADE_PROBE_MISCOUNT counts one trade more than it
 * reports; TRADE_PROBE_BAD_SUM reports each trade's pnl plus a little; TRADE_PROBE_OVERLAP reports
 * each entry one bar before the previous exit. The loader refuses the last three at its self-check. */
#include <ipcfloor/strategy.h>

#include <stdint.h>
#include <stdio.h>

#ifndef TRADE_PROBE_NAME
#define TRADE_PROBE_NAME "trade_probe"
#endif

static int probe_validate(const int64_t* p, uint64_t n_bars, char* why, size_t why_bytes) {
  (void)n_bars;
  if (p[0] < 1 || p[0] > 100000) {
    if (why) snprintf(why, why_bytes, "hold is %lld, outside [1, 100000]", (long long)p[0]);
    return 1;
  }
  return 0;
}

static uint64_t probe_cost(const int64_t* p, uint64_t n_bars) {
  (void)p;
  return n_bars > UINT64_MAX / 4 ? UINT64_MAX : 4 * n_bars;
}

static uint64_t probe_workspace_bytes(uint64_t n_bars) {
  (void)n_bars;
  return 0;
}

static int probe_run(const ipcfloor_columns* bars, const int64_t* p, double fee, void* workspace,
                     const ipcfloor_trade_sink* sink, ipcfloor_strategy_result* out) {
  (void)workspace;
  const uint64_t hold = (uint64_t)p[0];
  double pnl = 0.0;
  int64_t trades = 0;
#ifdef TRADE_PROBE_NEEDS_HIGH
  double highest = 0.0;
  for (uint64_t i = 0; i < bars->n_bars; ++i)
    if (bars->high[i] > highest) highest = bars->high[i];
  if (!(highest > 0.0)) return 1;
#endif
  for (uint64_t entry = 0; entry + hold < bars->n_bars; entry += hold) {
    const uint64_t exit = entry + hold;
    const double trade_pnl = (bars->close[exit] / bars->close[entry] - 1.0) * 100.0 - fee;
    pnl += trade_pnl;
    trades += 1;
#if defined(TRADE_PROBE_BAD_SUM)
    ipcfloor_report_trade(sink, entry, exit, 1, bars->close[entry], bars->close[exit], trade_pnl + 1e-9);
#elif defined(TRADE_PROBE_OVERLAP)
    ipcfloor_report_trade(sink, entry == 0 ? 0 : entry - 1, exit, 1, bars->close[entry], bars->close[exit], trade_pnl);
#else
    ipcfloor_report_trade(sink, entry, exit, 1, bars->close[entry], bars->close[exit], trade_pnl);
#endif
  }
#ifdef TRADE_PROBE_MISCOUNT
  trades += 1;
#endif
  out->pnl = pnl;
  out->trades = trades;
  return 0;
}

static const ipcfloor_strategy kTradeProbe = {
    .abi_version = IPCFLOOR_STRATEGY_ABI_VERSION,
    .struct_size = sizeof(ipcfloor_strategy),
    .name = TRADE_PROBE_NAME,
    .param_count = 1,
#ifdef TRADE_PROBE_NEEDS_HIGH
    .required_columns = IPCFLOOR_COLUMN_HIGH,
#endif
    .param_names = {"hold"},
    .example_params = {10},
    .validate = probe_validate,
    .cost = probe_cost,
    .workspace_bytes = probe_workspace_bytes,
    .run = probe_run,
};

IPCFLOOR_STRATEGY_EXPORT const ipcfloor_strategy* ipcfloor_strategy_v2(void) { return &kTradeProbe; }
