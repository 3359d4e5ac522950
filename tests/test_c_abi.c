/* The C ABI (include/ipcfloor/ipcfloor.h) from C11, against a live `ipcfloor serve`.
 *
 * Starts an engine on a small series, reads the series through the zero-copy view, runs a grid
 * with ipcfloor_sweep and ipcfloor_backtest and compares every combo with
 * `ipcfloor sweep --inproc --json` on the same series (equal trades, equal pnl bits); then the
 * error paths: no engine, bad arguments, refused windows (per combo), no free lane, and the
 * engine stopping under an attached client.
 *
 * Usage: test_c_abi IPCFLOOR_BINARY */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipcfloor/ipcfloor.h"

extern char **environ;

#define BARS 3000
#define SEED 7
#define GRID "6:200:40"
#define MAX_COMBOS 64

static int failures = 0;
static pid_t engine = -1;
static const char *binary = NULL;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      ++failures;                                          \
      fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                        \
      fputc('\n', stderr);                                 \
    }                                                      \
  } while (0)

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Sends SIGINT and reaps the engine within 10 s (SIGKILL after that). Returns its wait status. */
static int stop_engine(void) {
  int status = -1;
  if (engine <= 0) return status;
  kill(engine, SIGINT);
  for (int i = 0; i < 1000; ++i) {
    if (waitpid(engine, &status, WNOHANG) == engine) {
      engine = -1;
      return status;
    }
    sleep_ms(10);
  }
  kill(engine, SIGKILL);
  waitpid(engine, &status, 0);
  engine = -1;
  return status;
}

static void stop_engine_at_exit(void) { (void)stop_engine(); }

static int contains(const char *text, const char *part) { return text != NULL && strstr(text, part) != NULL; }

static uint64_t fnv1a64(const unsigned char *bytes, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 0x100000001b3ULL;
  return h;
}

struct reference_row {
  int64_t length;
  int64_t params[6];
  double pnl;
  int64_t trades;
};

/* `ipcfloor sweep --inproc --json` on the engine's series: one row per combo. */
static size_t read_reference(struct reference_row *rows, size_t max_rows) {
  char command[1024];
  snprintf(command, sizeof command, "'%s' sweep --inproc --json --bars %d --seed %d --grid %s", binary, BARS, SEED,
           GRID);
  FILE *pipe = popen(command, "r");
  if (pipe == NULL) return 0;
  size_t n = 0;
  char line[512];
  while (n < max_rows && fgets(line, sizeof line, pipe) != NULL) {
    struct reference_row *r = &rows[n];
    if (sscanf(line,
               "{\"L\":%" SCNd64 ",\"params\":[%" SCNd64 ",%" SCNd64 ",%" SCNd64 ",%" SCNd64 ",%" SCNd64 ",%" SCNd64
               "],\"pnl\":%lf,\"trades\":%" SCNd64 "}",
               &r->length, &r->params[0], &r->params[1], &r->params[2], &r->params[3], &r->params[4], &r->params[5],
               &r->pnl, &r->trades) == 9)
      ++n;
  }
  pclose(pipe);
  return n;
}

static void check_codes(void) {
  CHECK(ipcfloor_version() == IPCFLOOR_VERSION, "library %u, header %d", (unsigned)ipcfloor_version(),
        IPCFLOOR_VERSION);
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d", IPCFLOOR_VERSION_MAJOR, IPCFLOOR_VERSION_MINOR,
           IPCFLOOR_VERSION_PATCH);
  CHECK(strcmp(ipcfloor_version_string(), expected) == 0, "%s", ipcfloor_version_string());
  for (int code = IPCFLOOR_E_INTERNAL; code <= IPCFLOOR_OK; ++code) {
    CHECK(strcmp(ipcfloor_strerror(code), "unknown error") != 0, "code %d has no name", code);
    for (int other = code + 1; other <= IPCFLOOR_OK; ++other)
      CHECK(strcmp(ipcfloor_strerror(code), ipcfloor_strerror(other)) != 0, "codes %d and %d share a name", code,
            other);
  }
  CHECK(strcmp(ipcfloor_strerror(-99), "unknown error") == 0, "%s", ipcfloor_strerror(-99));
  CHECK(strcmp(ipcfloor_strerror(7), "unknown error") == 0, "%s", ipcfloor_strerror(7));

  int64_t params[6];
  CHECK(ipcfloor_combo_from_length(6, params) == IPCFLOOR_OK, "L=6");
  const int64_t six[6] = {3, 6, 2, 1, 2, 3};
  CHECK(memcmp(params, six, sizeof six) == 0, "L=6 gives [3,6,2,1,2,3]");
  CHECK(ipcfloor_combo_from_length(0, params) == IPCFLOOR_E_INVALID, "L=0 is refused");
  CHECK(ipcfloor_combo_from_length(5, NULL) == IPCFLOOR_E_INVALID, "NULL output is refused");

  /* NULL clients are harmless everywhere. */
  ipcfloor_detach(NULL);
  const double *close = (const double *)1;
  CHECK(ipcfloor_series(NULL, &close) == 0 && close == NULL, "series of NULL");
  double pnl;
  int64_t trades;
  CHECK(ipcfloor_backtest(NULL, six, &pnl, &trades) == IPCFLOOR_E_INVALID, "backtest on NULL");
  CHECK(ipcfloor_echo(NULL, six, params) == IPCFLOOR_E_INVALID, "echo on NULL");
}

static void check_attach_errors(void) {
  char name[128];
  snprintf(name, sizeof name, "ipcfloor-ctest-nobody-%d", (int)getpid());
  int err = 0;
  CHECK(ipcfloor_attach(name, &err) == NULL && err == IPCFLOOR_E_NO_ENGINE, "no engine: err %d", err);
  CHECK(contains(ipcfloor_last_error(NULL), name), "the message names the engine: %s", ipcfloor_last_error(NULL));

  CHECK(ipcfloor_attach(NULL, &err) == NULL && err == IPCFLOOR_E_INVALID, "NULL name: err %d", err);
  CHECK(ipcfloor_attach("../etc", &err) == NULL && err == IPCFLOOR_E_INVALID, "bad name: err %d", err);
  CHECK(contains(ipcfloor_last_error(NULL), "invalid"), "%s", ipcfloor_last_error(NULL));
  CHECK(ipcfloor_attach(name, NULL) == NULL, "err may be NULL");

  ipcfloor_options options;
  ipcfloor_options_init(&options);
  CHECK(options.size == sizeof options && options.wait == IPCFLOOR_WAIT_ENGINE && options.timeout_ns == 0,
        "defaults");
  options.size = 3;
  CHECK(ipcfloor_attach_with(name, &options, &err) == NULL && err == IPCFLOOR_E_INVALID, "bad size: err %d", err);
  CHECK(contains(ipcfloor_last_error(NULL), "options.size"), "%s", ipcfloor_last_error(NULL));
  ipcfloor_options_init(&options);
  options.wait = 9;
  CHECK(ipcfloor_attach_with(name, &options, &err) == NULL && err == IPCFLOOR_E_INVALID, "bad wait: err %d", err);
  CHECK(contains(ipcfloor_last_error(NULL), "wait mode 9"), "%s", ipcfloor_last_error(NULL));
  ipcfloor_options_init(&options);
  options.timeout_ns = -1;
  CHECK(ipcfloor_attach_with(name, &options, &err) == NULL && err == IPCFLOOR_E_INVALID, "negative timeout: %d",
        err);
}

static ipcfloor_client *start_engine_and_attach(const char *name) {
  char bars[16], seed[16];
  snprintf(bars, sizeof bars, "%d", BARS);
  snprintf(seed, sizeof seed, "%d", SEED);
  char *argv[] = {(char *)binary, "serve", "--name", (char *)name, "--bars", bars, "--seed", seed,
                  "--wait", "backoff", "--lanes", "2", "--quiet", NULL};
  if (posix_spawn(&engine, binary, NULL, NULL, argv, environ) != 0) {
    fprintf(stderr, "cannot start %s: %s\n", binary, strerror(errno));
    engine = -1;
    return NULL;
  }
  ipcfloor_options options;
  ipcfloor_options_init(&options);
  options.wait = IPCFLOOR_WAIT_BACKOFF;
  options.timeout_ns = 5000000000LL;
  int err = 0;
  for (int i = 0; i < 500; ++i) {
    ipcfloor_client *c = ipcfloor_attach_with(name, &options, &err);
    if (c != NULL) return c;
    int status;
    if (waitpid(engine, &status, WNOHANG) == engine) {
      fprintf(stderr, "ipcfloor serve exited early (status %d)\n", status);
      engine = -1;
      return NULL;
    }
    sleep_ms(20);
  }
  fprintf(stderr, "could not attach to %s within 10 s: %s\n", name, ipcfloor_last_error(NULL));
  return NULL;
}

static void check_series(ipcfloor_client *c) {
  const double *close = NULL;
  const size_t n = ipcfloor_series(c, &close);
  CHECK(n == BARS && close != NULL, "%zu bars", n);
  CHECK(ipcfloor_bars(c) == BARS, "bars %" PRIu64, ipcfloor_bars(c));
  if (n != BARS || close == NULL) return;
  CHECK(fnv1a64((const unsigned char *)close, n * sizeof *close) == ipcfloor_series_checksum(c),
        "the checksum is FNV-1a 64 of the series bytes");

  /* The same bars `ipcfloor gen` writes. */
  char path[256], command[1024];
  snprintf(path, sizeof path, "/tmp/ipcfloor-ctest-%d.f64", (int)getpid());
  snprintf(command, sizeof command, "'%s' gen --bars %d --seed %d -o '%s' >/dev/null 2>&1", binary, BARS, SEED, path);
  CHECK(system(command) == 0, "%s", command);
  FILE *file = fopen(path, "rb");
  CHECK(file != NULL, "%s", path);
  if (file != NULL) {
    static double generated[BARS];
    CHECK(fread(generated, sizeof generated[0], BARS, file) == BARS, "read %s", path);
    CHECK(memcmp(generated, close, sizeof generated) == 0, "the view holds the generated series bit for bit");
    fclose(file);
  }
  remove(path);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_c_abi IPCFLOOR_BINARY\n");
    return 2;
  }
  binary = argv[1];
  atexit(stop_engine_at_exit);

  check_codes();
  check_attach_errors();

  static struct reference_row reference[MAX_COMBOS];
  const size_t n = read_reference(reference, MAX_COMBOS);
  CHECK(n == 40, "%zu reference rows from sweep --inproc --json", n);
  if (n == 0) return 1;

  char name[128];
  snprintf(name, sizeof name, "ipcfloor-ctest-%d", (int)getpid());
  ipcfloor_client *c = start_engine_and_attach(name);
  CHECK(c != NULL, "attach to a live engine");
  if (c == NULL) return 1;

  CHECK(ipcfloor_fee(c) == 0.09, "fee %g", ipcfloor_fee(c));
  CHECK(contains(ipcfloor_series_name(c), "gbm"), "series name %s", ipcfloor_series_name(c));
  CHECK(strcmp(ipcfloor_engine_name(c), name) == 0, "engine name %s", ipcfloor_engine_name(c));
  CHECK(ipcfloor_engine_pid(c) == engine, "engine pid %d", (int)ipcfloor_engine_pid(c));
  CHECK(ipcfloor_lane(c) < 2, "lane %u", (unsigned)ipcfloor_lane(c));
  CHECK(ipcfloor_ring_capacity(c) >= 2, "ring capacity %u", (unsigned)ipcfloor_ring_capacity(c));
  CHECK(ipcfloor_wait_mode(c) == IPCFLOOR_WAIT_BACKOFF, "wait mode %d", (int)ipcfloor_wait_mode(c));
  CHECK(strcmp(ipcfloor_last_error(c), "") == 0, "no error yet: %s", ipcfloor_last_error(c));
  check_series(c);

  /* The grid, pipelined, against the reference. */
  static int64_t grid[MAX_COMBOS][6];
  static double pnl[MAX_COMBOS];
  static int64_t trades[MAX_COMBOS];
  static int status[MAX_COMBOS];
  for (size_t i = 0; i < n; ++i) {
    int64_t params[6];
    CHECK(ipcfloor_combo_from_length(reference[i].length, params) == IPCFLOOR_OK, "L=%" PRId64, reference[i].length);
    CHECK(memcmp(params, reference[i].params, sizeof params) == 0, "combo_from_length(%" PRId64 ")",
          reference[i].length);
    memcpy(grid[i], reference[i].params, sizeof grid[i]);
  }
  const int64_t(*const_grid)[6] = (const int64_t(*)[6])grid;
  int refused = ipcfloor_sweep(c, const_grid, n, pnl, trades, status);
  CHECK(refused == 0, "sweep: %d (%s)", refused, ipcfloor_last_error(c));
  for (size_t i = 0; i < n; ++i) {
    CHECK(status[i] == IPCFLOOR_OK, "combo %zu status %d", i, status[i]);
    CHECK(memcmp(&pnl[i], &reference[i].pnl, sizeof pnl[i]) == 0 && trades[i] == reference[i].trades,
          "combo %zu (L=%" PRId64 "): pnl %.17g trades %" PRId64 ", want %.17g %" PRId64, i, reference[i].length,
          pnl[i], trades[i], reference[i].pnl, reference[i].trades);
  }
  /* status may be NULL. */
  CHECK(ipcfloor_sweep(c, const_grid, n, pnl, trades, NULL) == 0, "sweep without statuses");
  CHECK(ipcfloor_sweep(c, const_grid, 0, NULL, NULL, NULL) == 0, "an empty sweep");
  CHECK(ipcfloor_sweep(c, NULL, n, pnl, trades, status) == IPCFLOOR_E_INVALID, "NULL params");

  /* One at a time. */
  for (size_t i = 0; i < n; i += 7) {
    double one_pnl = 0.0;
    int64_t one_trades = -1;
    CHECK(ipcfloor_backtest(c, grid[i], &one_pnl, &one_trades) == IPCFLOOR_OK, "backtest %zu: %s", i,
          ipcfloor_last_error(c));
    CHECK(memcmp(&one_pnl, &reference[i].pnl, sizeof one_pnl) == 0 && one_trades == reference[i].trades,
          "backtest %zu", i);
  }

  /* Refused windows: per combo, the others unharmed. */
  grid[5][1] = 0;
  grid[9][5] = BARS + 1;
  refused = ipcfloor_sweep(c, const_grid, n, pnl, trades, status);
  CHECK(refused == 2, "two refused combos, got %d", refused);
  CHECK(status[5] == IPCFLOOR_E_WINDOW && status[9] == IPCFLOOR_E_WINDOW, "statuses %d %d", status[5], status[9]);
  CHECK(isnan(pnl[5]) && trades[5] == 0 && isnan(pnl[9]), "a refused combo has pnl NaN");
  CHECK(contains(ipcfloor_last_error(c), "combo 5 of 40") && contains(ipcfloor_last_error(c), "window L") &&
            contains(ipcfloor_last_error(c), name),
        "%s", ipcfloor_last_error(c));
  for (size_t i = 0; i < n; ++i) {
    if (i == 5 || i == 9) continue;
    CHECK(status[i] == IPCFLOOR_OK && memcmp(&pnl[i], &reference[i].pnl, sizeof pnl[i]) == 0 &&
              trades[i] == reference[i].trades,
          "combo %zu next to refused ones", i);
  }
  double one_pnl;
  int64_t one_trades;
  CHECK(ipcfloor_backtest(c, grid[9], &one_pnl, &one_trades) == IPCFLOOR_E_WINDOW, "backtest of a bad window");
  CHECK(contains(ipcfloor_last_error(c), "window p (position 5) is 3001"), "%s", ipcfloor_last_error(c));
  CHECK(ipcfloor_backtest(c, grid[0], &one_pnl, &one_trades) == IPCFLOOR_OK && one_trades == reference[0].trades,
        "the client stays usable after a refusal");

  /* Echo: any 48 bytes come back. */
  const int64_t in[6] = {1, -2, 3, -4, INT64_MIN, INT64_MAX};
  int64_t out[6] = {0};
  CHECK(ipcfloor_echo(c, in, out) == IPCFLOOR_OK && memcmp(in, out, sizeof in) == 0, "echo");

  /* Two lanes: a second client gets the other, a third finds none. */
  int err = 0;
  ipcfloor_client *second = ipcfloor_attach(name, &err);
  CHECK(second != NULL && ipcfloor_lane(second) != ipcfloor_lane(c), "second client: err %d", err);
  ipcfloor_client *third = ipcfloor_attach(name, &err);
  CHECK(third == NULL && err == IPCFLOOR_E_BUSY, "third client: err %d", err);
  CHECK(contains(ipcfloor_last_error(NULL), "no free lane"), "%s", ipcfloor_last_error(NULL));
  ipcfloor_detach(third);
  ipcfloor_detach(second);

  /* The engine stops under us: a clear error, never a hang. */
  const int stopped = stop_engine();
  CHECK(WIFEXITED(stopped) && WEXITSTATUS(stopped) == 0, "serve exits 0 on SIGINT (status %d)", stopped);
  CHECK(ipcfloor_backtest(c, grid[0], &one_pnl, &one_trades) == IPCFLOOR_E_ENGINE_GONE, "backtest after stop");
  CHECK(contains(ipcfloor_last_error(c), name) && contains(ipcfloor_last_error(c), "gone"), "%s",
        ipcfloor_last_error(c));
  refused = ipcfloor_sweep(c, const_grid, n, pnl, trades, status);
  CHECK(refused == IPCFLOOR_E_ENGINE_GONE && status[0] == IPCFLOOR_E_ENGINE_GONE &&
            status[n - 1] == IPCFLOOR_E_ENGINE_GONE,
        "sweep after stop: %d", refused);
  ipcfloor_detach(c);
  CHECK(ipcfloor_attach(name, &err) == NULL && err == IPCFLOOR_E_NO_ENGINE, "attach after stop: %d", err);

  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("C ABI: %zu combos through %s match sweep --inproc --json bit for bit; error paths hold\n", n, name);
  return 0;
}
