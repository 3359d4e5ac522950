/* A C program outside the ipcfloor repository: attach to a running engine, look at its series
 * without copying it, run a grid of lengths through the ring and print one JSON line per combo
 * (L, params, pnl and trades, as `ipcfloor sweep --json` writes them).
 *
 *   make          # or, as the README builds it (the rpath lets ./sweep find libipcfloor.so.0):
 *   cc -std=c11 sweep.c $(pkg-config --cflags --libs ipcfloor) -Wl,-rpath,$(pkg-config --variable=libdir ipcfloor) -o sweep
 *   ./sweep ipcfloor 6,8,11,50,200         # engine name, lengths */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include <ipcfloor/ipcfloor.h>

enum { kMaxCombos = 4096 };

static int parse_lengths(const char *text, int64_t *lengths, size_t *n) {
  *n = 0;
  for (const char *at = text; *at != '\0';) {
    char *end = NULL;
    errno = 0;
    const long long value = strtoll(at, &end, 10);
    if (end == at || errno != 0 || value < 1 || *n == kMaxCombos || (*end != ',' && *end != '\0')) return -1;
    lengths[(*n)++] = value;
    at = *end == ',' ? end + 1 : end;
  }
  return *n > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  static int64_t lengths[kMaxCombos];
  static int64_t grid[kMaxCombos][6];
  static double pnl[kMaxCombos];
  static int64_t trades[kMaxCombos];
  static int status[kMaxCombos];
  size_t n = 0;
  if (argc != 3 || parse_lengths(argv[2], lengths, &n) != 0) {
    fprintf(stderr, "usage: %s ENGINE_NAME L1,L2,... (whole lengths >= 1)\n", argv[0]);
    return 2;
  }
  if (ipcfloor_version() / 10000 != IPCFLOOR_VERSION_MAJOR) {
    fprintf(stderr, "libipcfloor %s does not match the header's major version %d\n", ipcfloor_version_string(),
            IPCFLOOR_VERSION_MAJOR);
    return 1;
  }

  int err = 0;
  ipcfloor_client *engine = ipcfloor_attach(argv[1], &err);
  if (engine == NULL) {
    fprintf(stderr, "attach %s: %s (%s)\n", argv[1], ipcfloor_last_error(NULL), ipcfloor_strerror(err));
    return 1;
  }

  const double *close = NULL;
  const size_t bars = ipcfloor_series(engine, &close);
  double low = close[0], high = close[0];
  for (size_t i = 1; i < bars; ++i) {
    if (close[i] < low) low = close[i];
    if (close[i] > high) high = close[i];
  }
  fprintf(stderr, "engine %s (pid %d), lane %u: series %s, %zu bars, checksum %016" PRIx64 ", fee %g\n",
          ipcfloor_engine_name(engine), (int)ipcfloor_engine_pid(engine), (unsigned)ipcfloor_lane(engine),
          ipcfloor_series_name(engine), bars, ipcfloor_series_checksum(engine), ipcfloor_fee(engine));
  fprintf(stderr, "series: min %.17g max %.17g last %.17g\n", low, high, close[bars - 1]);
  /* The round trips are shortest from the cpus the engine published as nearest its serving one. */
  int32_t cpu = -1;
  if (ipcfloor_pin_near_engine(engine, &cpu) == IPCFLOOR_OK)
    fprintf(stderr, "on cpu %d, next to the engine's serving cpu %d\n", (int)cpu, (int)ipcfloor_serving_cpu(engine));
  else
    fprintf(stderr, "not pinned: %s\n", ipcfloor_last_error(engine));

  for (size_t i = 0; i < n; ++i) ipcfloor_combo_from_length(lengths[i], grid[i]);
  const int refused = ipcfloor_sweep(engine, (const int64_t(*)[6])grid, n, pnl, trades, status);
  if (refused < 0) {
    fprintf(stderr, "sweep: %s (%s)\n", ipcfloor_last_error(engine), ipcfloor_strerror(refused));
    ipcfloor_detach(engine);
    return 1;
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t *w = grid[i];
    if (status[i] != IPCFLOOR_OK) {
      fprintf(stderr, "L=%" PRId64 ": %s\n", lengths[i], ipcfloor_strerror(status[i]));
      continue;
    }
    printf("{\"L\":%" PRId64 ",\"params\":[%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
           "],\"pnl\":%.17g,\"trades\":%" PRId64 "}\n",
           lengths[i], w[0], w[1], w[2], w[3], w[4], w[5], pnl[i], trades[i]);
  }
  if (refused > 0) fprintf(stderr, "%d combos refused; the first: %s\n", refused, ipcfloor_last_error(engine));
  ipcfloor_detach(engine);
  return refused == 0 ? 0 : 1;
}
