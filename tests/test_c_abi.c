/* The C ABI (include/ipcfloor/ipcfloor.h) from C11, against a live `ipcfloor serve`.
 *
 * Starts an engine on a small series, reads the series through the zero-copy view, runs a grid
 * with ipcfloor_sweep and ipcfloor_backtest and compares every combo with
 * `ipcfloor sweep --inproc --json` on the same series (equal trades, equal pnl bits); then the
 * error paths: no engine, bad arguments, refused windows (per combo), no free lane, and the
 * engine stopping under an attached client. Then live mode against `ipcfloor serve --live`: a
 * series preloaded in part, the rest appended by one client while another's subscriptions
 * stream signals whose last pnl and trades equal `sweep --inproc` on the whole series bit for
 * bit; capacity full, bad price, not the writer, not live, no room, and a poll with nothing
 * pending, each by its code and its message. Then an engine of two series (serve --data A
 * --data B): the series table (count, names, zero-copy bars equal to the files), backtests and a
 * sweep on series 1 equal to `sweep --inproc --data B` bit for bit (and on series 0 to --data A),
 * windows judged against the named series, and a series index past the table refused by
 * IPCFLOOR_E_NO_SUCH_SERIES with a sentence naming it. Then interrupts and fork: a sweep and a
 * signal wait stopped by the interrupt check (ipcfloor_set_interrupt) with IPCFLOOR_E_INTERRUPTED,
 * between answers and on a stopped engine, after which the client answers the reference again;
 * a forked child refused with IPCFLOOR_E_FORKED (and served once it attaches again) while the
 * parent's lane keeps answering; timeouts past IPCFLOOR_TIMEOUT_MAX_NS refused.
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

/* `ipcfloor sweep --inproc --json ARGS`: one row per combo. */
static size_t read_rows(const char *args, struct reference_row *rows, size_t max_rows) {
  char command[1024];
  snprintf(command, sizeof command, "'%s' sweep --inproc --json --quiet %s", binary, args);
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

/* The same on the engine's series. */
static size_t read_reference(struct reference_row *rows, size_t max_rows) {
  char args[256];
  snprintf(args, sizeof args, "--bars %d --seed %d --grid %s", BARS, SEED, GRID);
  return read_rows(args, rows, max_rows);
}

static double elapsed_ms(const struct timespec *since) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - since->tv_sec) * 1e3 + (double)(now.tv_nsec - since->tv_nsec) / 1e6;
}

static void check_codes(void) {
  CHECK(ipcfloor_version() == IPCFLOOR_VERSION, "library %u, header %d", (unsigned)ipcfloor_version(),
        IPCFLOOR_VERSION);
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d", IPCFLOOR_VERSION_MAJOR, IPCFLOOR_VERSION_MINOR,
           IPCFLOOR_VERSION_PATCH);
  CHECK(strcmp(ipcfloor_version_string(), expected) == 0, "%s", ipcfloor_version_string());
  /* Every code, the live ones and IPCFLOOR_NO_SIGNAL included, has a name of its own. */
  for (int code = IPCFLOOR_E_INTERRUPTED; code <= IPCFLOOR_NO_SIGNAL; ++code) {
    CHECK(strcmp(ipcfloor_strerror(code), "unknown error") != 0, "code %d has no name", code);
    for (int other = code + 1; other <= IPCFLOOR_NO_SIGNAL; ++other)
      CHECK(strcmp(ipcfloor_strerror(code), ipcfloor_strerror(other)) != 0, "codes %d and %d share a name", code,
            other);
  }
  CHECK(strcmp(ipcfloor_strerror(IPCFLOOR_E_SUBSCRIBERS_BEHIND), "unknown error") != 0, "subscribers behind");
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
  uint64_t bars = 0;
  uint32_t id = 0;
  ipcfloor_signal signal;
  CHECK(ipcfloor_append(NULL, 100.0, 0, &bars) == IPCFLOOR_E_INVALID, "append on NULL");
  CHECK(ipcfloor_append_paced(NULL, 100.0, 0, &bars) == IPCFLOOR_E_INVALID, "paced append on NULL");
  CHECK(ipcfloor_subscribe(NULL, six, &id, NULL) == IPCFLOOR_E_INVALID, "subscribe on NULL");
  CHECK(ipcfloor_snapshot(NULL) == IPCFLOOR_E_INVALID, "snapshot on NULL");
  CHECK(ipcfloor_poll_signal(NULL, &signal) == IPCFLOOR_E_INVALID, "poll_signal on NULL");
  CHECK(ipcfloor_wait_signal(NULL, &signal) == IPCFLOOR_E_INVALID, "wait_signal on NULL");
  CHECK(ipcfloor_is_live(NULL) == 0 && ipcfloor_capacity(NULL) == 0 && ipcfloor_signals_dropped(NULL) == 0,
        "live accessors of NULL");
  close = (const double *)1;
  CHECK(ipcfloor_published_series(NULL, &close) == 0 && close == NULL, "published series of NULL");
  close = (const double *)1;
  CHECK(ipcfloor_series_count(NULL) == 0 && ipcfloor_series_key(NULL, 0) == NULL &&
            ipcfloor_series_at(NULL, 0, &close) == 0 && close == NULL,
        "series table of NULL");
  CHECK(ipcfloor_backtest_on(NULL, 0, six, &pnl, &trades) == IPCFLOOR_E_INVALID, "backtest_on on NULL");
  CHECK(ipcfloor_sweep_on(NULL, 0, NULL, 0, NULL, NULL, NULL) == IPCFLOOR_E_INVALID, "sweep_on on NULL");
  CHECK(strcmp(ipcfloor_strerror(IPCFLOOR_E_NO_SUCH_SERIES), "no such series") == 0, "%s",
        ipcfloor_strerror(IPCFLOOR_E_NO_SUCH_SERIES));
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
  /* A timeout has a range: past one day (it was accepted up to 292 years) it is refused, by name. */
  options.timeout_ns = IPCFLOOR_TIMEOUT_MAX_NS + 1;
  CHECK(ipcfloor_attach_with(name, &options, &err) == NULL && err == IPCFLOOR_E_INVALID, "timeout past a day: %d",
        err);
  CHECK(contains(ipcfloor_last_error(NULL), "outside its range") &&
            contains(ipcfloor_last_error(NULL), "IPCFLOOR_TIMEOUT_MAX_NS"),
        "%s", ipcfloor_last_error(NULL));
  options.timeout_ns = IPCFLOOR_TIMEOUT_MAX_NS;
  CHECK(ipcfloor_attach_with(name, &options, &err) == NULL && err == IPCFLOOR_E_NO_ENGINE,
        "a timeout of one day is in range: %d", err);
  CHECK(ipcfloor_set_interrupt(NULL, NULL, NULL, 0) == IPCFLOOR_E_INVALID, "set_interrupt on NULL");
}

static ipcfloor_client *attach_backoff(const char *name, int64_t timeout_ns, int *err) {
  ipcfloor_options options;
  ipcfloor_options_init(&options);
  options.wait = IPCFLOOR_WAIT_BACKOFF;
  options.timeout_ns = timeout_ns;
  return ipcfloor_attach_with(name, &options, err);
}

/* Starts `ipcfloor serve` with argv and attaches to it, retrying (bounded) while it comes up. */
static ipcfloor_client *spawn_and_attach(char *const argv[], const char *name) {
  if (posix_spawn(&engine, binary, NULL, NULL, argv, environ) != 0) {
    fprintf(stderr, "cannot start %s: %s\n", binary, strerror(errno));
    engine = -1;
    return NULL;
  }
  int err = 0;
  for (int i = 0; i < 500; ++i) {
    ipcfloor_client *c = attach_backoff(name, 5000000000LL, &err);
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

static ipcfloor_client *start_engine_and_attach(const char *name) {
  char bars[16], seed[16];
  snprintf(bars, sizeof bars, "%d", BARS);
  snprintf(seed, sizeof seed, "%d", SEED);
  char *argv[] = {(char *)binary, "serve", "--name", (char *)name, "--bars", bars, "--seed", seed,
                  "--wait", "backoff", "--lanes", "2", "--quiet", NULL};
  return spawn_and_attach(argv, name);
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

  /* One series: the table holds it alone, named "default" (generated), the same bars. */
  const double *first = NULL;
  CHECK(ipcfloor_series_count(c) == 1, "series count %u", (unsigned)ipcfloor_series_count(c));
  CHECK(ipcfloor_series_key(c, 0) != NULL && strcmp(ipcfloor_series_key(c, 0), "default") == 0, "series 0 is %s",
        ipcfloor_series_key(c, 0));
  CHECK(ipcfloor_series_key(c, 1) == NULL, "no name past the table");
  CHECK(ipcfloor_series_at(c, 0, &first) == n && first == close, "series_at(0) is ipcfloor_series");
  first = close;
  CHECK(ipcfloor_series_at(c, 1, &first) == 0 && first == NULL, "no bars past the table");
}

/* Live calls on an engine started without --live: IPCFLOOR_E_NOT_LIVE, saying how to start one. */
static void check_not_live(ipcfloor_client *c, const char *name) {
  CHECK(ipcfloor_is_live(c) == 0, "a plain engine is not live");
  CHECK(ipcfloor_capacity(c) == BARS, "capacity %" PRIu64, ipcfloor_capacity(c));
  const double *published = NULL;
  CHECK(ipcfloor_published_series(c, &published) == BARS && published != NULL, "published series of a plain engine");
  uint64_t bars = 12345;
  CHECK(ipcfloor_append(c, 100.0, 1, &bars) == IPCFLOOR_E_NOT_LIVE && bars == 12345, "append on a plain engine");
  CHECK(ipcfloor_append_paced(c, 100.0, 1, &bars) == IPCFLOOR_E_NOT_LIVE && bars == 12345,
        "paced append on a plain engine");
  CHECK(contains(ipcfloor_last_error(c), name) && contains(ipcfloor_last_error(c), "is not live") &&
            contains(ipcfloor_last_error(c), "cannot append bars") && contains(ipcfloor_last_error(c), "--live"),
        "%s", ipcfloor_last_error(c));
  int64_t six[6];
  ipcfloor_combo_from_length(6, six);
  uint32_t id = 99;
  CHECK(ipcfloor_subscribe(c, six, &id, NULL) == IPCFLOOR_E_NOT_LIVE && id == 99, "subscribe on a plain engine");
  CHECK(contains(ipcfloor_last_error(c), "cannot subscribe combos"), "%s", ipcfloor_last_error(c));
  CHECK(ipcfloor_snapshot(c) == IPCFLOOR_E_NOT_LIVE, "snapshot on a plain engine");
  ipcfloor_signal signal;
  CHECK(ipcfloor_poll_signal(c, &signal) == IPCFLOOR_E_NOT_LIVE, "poll_signal on a plain engine");
  CHECK(contains(ipcfloor_last_error(c), "cannot read signals"), "%s", ipcfloor_last_error(c));
  CHECK(ipcfloor_wait_signal(c, &signal) == IPCFLOOR_E_NOT_LIVE, "wait_signal on a plain engine");
  CHECK(ipcfloor_signals_dropped(c) == 0, "no drops on a plain engine");
}

#define LIVE_PRELOAD 300
#define LIVE_BARS 340

static int same_double(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* An interrupt check that counts its calls and says stop from the stop_at-th on. */
struct interrupt_probe {
  int calls;
  int stop_at;
};

static int stop_after(void *context) {
  struct interrupt_probe *probe = (struct interrupt_probe *)context;
  return ++probe->calls >= probe->stop_at;
}


/* Live mode end to end: the series is gen --bars 340; the engine preloads its first 300 bars, one
 * client appends the other 40, another subscribes L=6 and L=9 and reads their signals. */
static void check_live(void) {
  char full[256], preload[256], args[600];
  snprintf(full, sizeof full, "/tmp/ipcfloor-ctest-live-%d.f64", (int)getpid());
  snprintf(preload, sizeof preload, "/tmp/ipcfloor-ctest-live-%d-preload.f64", (int)getpid());
  snprintf(args, sizeof args, "'%s' gen --bars %d --seed %d -o '%s' >/dev/null 2>&1", binary, LIVE_BARS, SEED, full);
  CHECK(system(args) == 0, "%s", args);
  static double close[LIVE_BARS];
  FILE *file = fopen(full, "rb");
  CHECK(file != NULL && fread(close, sizeof close[0], LIVE_BARS, file) == LIVE_BARS, "read %s", full);
  if (file != NULL) fclose(file);
  file = fopen(preload, "wb");
  CHECK(file != NULL && fwrite(close, sizeof close[0], LIVE_PRELOAD, file) == LIVE_PRELOAD, "write %s", preload);
  if (file != NULL) fclose(file);

  /* The batch kernel on the preloaded bars and on the whole series. */
  struct reference_row before[2], after[2];
  snprintf(args, sizeof args, "--data '%s' --lengths 6,9", preload);
  const size_t n_before = read_rows(args, before, 2);
  snprintf(args, sizeof args, "--data '%s' --lengths 6,9", full);
  const size_t n_after = read_rows(args, after, 2);
  CHECK(n_before == 2 && n_after == 2, "reference rows %zu %zu", n_before, n_after);
  if (n_before != 2 || n_after != 2) return;

  char name[128], capacity[16];
  snprintf(name, sizeof name, "ipcfloor-ctest-live-%d", (int)getpid());
  snprintf(capacity, sizeof capacity, "%d", LIVE_BARS);
  char *argv[] = {(char *)binary, "serve", "--name", name, "--data", preload, "--live", "--capacity", capacity,
                  "--subscriptions", "2", "--signal-capacity", "256", "--wait", "backoff", "--lanes", "3",
                  "--quiet", NULL};
  ipcfloor_client *writer = spawn_and_attach(argv, name);
  CHECK(writer != NULL, "attach to a live engine");
  if (writer == NULL) return;
  int err = 0;
  ipcfloor_client *reader = attach_backoff(name, 5000000000LL, &err);
  ipcfloor_client *idle = attach_backoff(name, 300000000LL, &err); /* 300 ms: its wait must time out */
  CHECK(reader != NULL && idle != NULL, "two more clients: %s", ipcfloor_last_error(NULL));
  if (reader == NULL || idle == NULL) return;
  CHECK(ipcfloor_is_live(reader) == 1 && ipcfloor_capacity(reader) == LIVE_BARS, "live, capacity %" PRIu64,
        ipcfloor_capacity(reader));
  const double *published = NULL;
  CHECK(ipcfloor_published_series(reader, &published) == LIVE_PRELOAD && ipcfloor_bars(reader) == LIVE_PRELOAD,
        "the preloaded bars are published");

  /* Nothing subscribed, nothing pending: the poll says so at once and leaves the last error. */
  ipcfloor_signal signal;
  memset(&signal, 0x5a, sizeof signal);
  const ipcfloor_signal untouched = signal;
  struct timespec started;
  clock_gettime(CLOCK_MONOTONIC, &started);
  int polled = IPCFLOOR_NO_SIGNAL;
  for (int i = 0; i < 1000; ++i) {
    const int once = ipcfloor_poll_signal(reader, &signal);
    if (once != IPCFLOOR_NO_SIGNAL) polled = once;
  }
  const double poll_ms = elapsed_ms(&started);
  CHECK(polled == IPCFLOOR_NO_SIGNAL, "poll with nothing pending: %d", polled);
  CHECK(poll_ms < 50.0, "1,000 polls with nothing pending took %.3f ms: a poll must not wait", poll_ms);
  CHECK(memcmp(&signal, &untouched, sizeof signal) == 0, "a poll that found nothing leaves *out alone");
  CHECK(strcmp(ipcfloor_last_error(reader), "") == 0, "no signal is not an error: %s", ipcfloor_last_error(reader));
  CHECK(strcmp(ipcfloor_strerror(IPCFLOOR_NO_SIGNAL), "no signal yet") == 0, "%s",
        ipcfloor_strerror(IPCFLOOR_NO_SIGNAL));

  /* A wait for a signal that will not come (5 s timeout) stops when the interrupt check says so:
   * it is asked every 1 ms of waiting, and the fourth time it says stop. */
  struct interrupt_probe probe = {0, 4};
  CHECK(ipcfloor_set_interrupt(reader, stop_after, &probe, 1000000) == IPCFLOOR_OK, "set_interrupt");
  CHECK(ipcfloor_wait_signal(reader, &signal) == IPCFLOOR_E_INTERRUPTED && probe.calls == 4,
        "an interrupted wait_signal: %d calls, %s", probe.calls, ipcfloor_last_error(reader));
  CHECK(ipcfloor_set_interrupt(reader, NULL, NULL, 0) == IPCFLOOR_OK, "clear the interrupt check");
  CHECK(ipcfloor_poll_signal(reader, &signal) == IPCFLOOR_NO_SIGNAL, "the reader polls again after the interrupt");

  /* Subscribe L=6 and L=9: their state after the preload is the batch kernel's on it. */
  int64_t combos[3][6];
  ipcfloor_combo_from_length(6, combos[0]);
  ipcfloor_combo_from_length(9, combos[1]);
  ipcfloor_combo_from_length(11, combos[2]);
  for (uint32_t k = 0; k < 2; ++k) {
    uint32_t id = 99;
    ipcfloor_signal state;
    CHECK(ipcfloor_subscribe(reader, combos[k], &id, &state) == IPCFLOOR_OK, "subscribe %u: %s", (unsigned)k,
          ipcfloor_last_error(reader));
    CHECK(id == k && state.subscription == k, "subscription id %u", (unsigned)id);
    CHECK(state.bar == LIVE_PRELOAD - 1 && state.flags == IPCFLOOR_SIGNAL_SNAPSHOT && isnan(state.value[0]),
          "state after the preload: bar %" PRIu64 " flags %u", state.bar, (unsigned)state.flags);
    CHECK(state.trades == before[k].trades && same_double(state.pnl, before[k].pnl),
          "L=%" PRId64 " after the preload: pnl %.17g trades %" PRId64 ", want %.17g %" PRId64, before[k].length,
          state.pnl, state.trades, before[k].pnl, before[k].trades);
  }
  /* serve --subscriptions 2: a third is refused by name, and so is a window past the capacity. */
  uint32_t id = 99;
  CHECK(ipcfloor_subscribe(reader, combos[2], &id, NULL) == IPCFLOOR_E_NO_ROOM && id == 99, "a third subscription");
  CHECK(contains(ipcfloor_last_error(reader), name) && contains(ipcfloor_last_error(reader), "already holds 2") &&
            contains(ipcfloor_last_error(reader), "--subscriptions"),
        "%s", ipcfloor_last_error(reader));
  int64_t too_long[6] = {3, LIVE_BARS + 1, 2, 1, 2, 3};
  CHECK(ipcfloor_subscribe(idle, too_long, &id, NULL) == IPCFLOOR_E_WINDOW, "a window past the capacity");
  CHECK(contains(ipcfloor_last_error(idle), "parameter L (position 1) is 341, refused by strategy hma for a series of 340 bars"), "%s",
        ipcfloor_last_error(idle));

  /* Refused appends: each by its code and its sentence; the series is unchanged. */
  uint64_t bars = 0;
  CHECK(ipcfloor_append(writer, nan(""), 1, &bars) == IPCFLOOR_E_BAD_PRICE, "a NaN close");
  CHECK(contains(ipcfloor_last_error(writer), "close nan") &&
            contains(ipcfloor_last_error(writer), "finite number > 0") && contains(ipcfloor_last_error(writer), name),
        "%s", ipcfloor_last_error(writer));
  CHECK(ipcfloor_append(writer, -1.5, 1, &bars) == IPCFLOOR_E_BAD_PRICE, "a negative close");
  CHECK(ipcfloor_published_series(reader, NULL) == LIVE_PRELOAD, "refused closes are not published");

  /* The other 40 bars, tick = bar + 1; every other one paced (its signals fit the reader's ring). */
  for (size_t i = LIVE_PRELOAD; i < LIVE_BARS; ++i) {
    const int appended = i % 2 == 0 ? ipcfloor_append(writer, close[i], (uint64_t)i + 1, &bars)
                                    : ipcfloor_append_paced(writer, close[i], (uint64_t)i + 1, &bars);
    CHECK(appended == IPCFLOOR_OK && bars == i + 1, "append bar %zu: %s", i, ipcfloor_last_error(writer));
    if (i == LIVE_PRELOAD) {
      /* The writer is taken: another client's append is refused. */
      CHECK(ipcfloor_append(reader, 99.0, 0, &bars) == IPCFLOOR_E_NOT_WRITER, "a second writer");
      CHECK(contains(ipcfloor_last_error(reader), "another client is the series' writer"), "%s",
            ipcfloor_last_error(reader));
    }
  }
  CHECK(ipcfloor_append(writer, 100.0, 0, &bars) == IPCFLOOR_E_CAPACITY_FULL, "an append past the capacity");
  CHECK(contains(ipcfloor_last_error(writer), "full at its 340 bars") &&
            contains(ipcfloor_last_error(writer), "nothing was overwritten"),
        "%s", ipcfloor_last_error(writer));
  CHECK(ipcfloor_published_series(reader, &published) == LIVE_BARS &&
            memcmp(published, close, sizeof close) == 0,
        "the published series is the generated one, bit for bit");

  /* 40 signals per subscription, in bar order; the last equal the batch kernel on all 340 bars. */
  ipcfloor_signal last[2];
  uint64_t next_bar[2] = {LIVE_PRELOAD, LIVE_PRELOAD};
  int got = 0;
  for (int i = 0; i < 2 * (LIVE_BARS - LIVE_PRELOAD); ++i) {
    const int waited = i % 2 == 0 ? ipcfloor_wait_signal(reader, &signal) : ipcfloor_poll_signal(reader, &signal);
    CHECK(waited == IPCFLOOR_OK, "signal %d: %d %s", i, waited, ipcfloor_last_error(reader));
    if (waited != IPCFLOOR_OK || signal.subscription > 1) break;
    ++got;
    const uint32_t k = signal.subscription;
    CHECK(signal.bar == next_bar[k] && signal.tick == signal.bar + 1 && signal.flags == 0 && signal.dropped == 0,
          "subscription %u: bar %" PRIu64 " (want %" PRIu64 ") tick %" PRIu64 " flags %u", (unsigned)k, signal.bar,
          next_bar[k], signal.tick, (unsigned)signal.flags);
    CHECK(signal.cross >= -1 && signal.cross <= 1 && signal.position >= -1 && signal.position <= 1, "cross, position");
    ++next_bar[k];
    last[k] = signal;
  }
  CHECK(got == 80, "%d signals", got);
  CHECK(ipcfloor_poll_signal(reader, &signal) == IPCFLOOR_NO_SIGNAL, "nothing after the last bar's signals");
  for (int k = 0; k < 2 && got == 80; ++k)
    CHECK(last[k].trades == after[k].trades && same_double(last[k].pnl, after[k].pnl),
          "L=%" PRId64 " after bar 339: pnl %.17g trades %" PRId64 ", want %.17g %" PRId64 " (sweep --inproc)",
          after[k].length, last[k].pnl, last[k].trades, after[k].pnl, after[k].trades);

  /* A snapshot: one signal per subscription, the state now. */
  CHECK(ipcfloor_snapshot(reader) == 2, "snapshot of two subscriptions");
  for (int k = 0; k < 2; ++k) {
    CHECK(ipcfloor_poll_signal(reader, &signal) == IPCFLOOR_OK && signal.subscription == (uint32_t)k &&
              (signal.flags & IPCFLOOR_SIGNAL_SNAPSHOT) != 0 && signal.bar == LIVE_BARS - 1 && signal.tick == 0 &&
              signal.trades == after[k].trades && same_double(signal.pnl, after[k].pnl) &&
              same_double(signal.value[0], last[k].value[0]),
          "snapshot signal %d", k);
  }
  CHECK(ipcfloor_snapshot(idle) == 0, "a client that subscribed nothing has nothing to snapshot");
  CHECK(ipcfloor_signals_dropped(reader) == 0, "no signal dropped: %" PRIu64, ipcfloor_signals_dropped(reader));

  /* A backtest on the live engine runs on the published bars: the same answer again. */
  double pnl = 0.0;
  int64_t trades = -1;
  CHECK(ipcfloor_backtest(idle, combos[0], &pnl, &trades) == IPCFLOOR_OK && trades == after[0].trades &&
            same_double(pnl, after[0].pnl),
        "backtest L=6 on the published bars");
  int64_t past_preload[6] = {3, LIVE_PRELOAD + 20, 2, 1, 2, 3};
  CHECK(ipcfloor_backtest(idle, past_preload, &pnl, &trades) == IPCFLOOR_OK, "a window past the preload: %s",
        ipcfloor_last_error(idle));
  CHECK(ipcfloor_backtest(idle, too_long, &pnl, &trades) == IPCFLOOR_E_WINDOW, "a window past the published bars");
  CHECK(contains(ipcfloor_last_error(idle), "parameter L (position 1) is 341, refused by strategy hma for a series of 340 bars"),
        "%s", ipcfloor_last_error(idle));

  /* A wait with nothing to come ends at the client's timeout, saying why. */
  clock_gettime(CLOCK_MONOTONIC, &started);
  CHECK(ipcfloor_wait_signal(idle, &signal) == IPCFLOOR_E_TIMEOUT, "a wait with nothing subscribed");
  const double waited_ms = elapsed_ms(&started);
  CHECK(waited_ms >= 250.0 && waited_ms < 5000.0, "the wait lasted %.1f ms for a 300 ms timeout", waited_ms);
  CHECK(contains(ipcfloor_last_error(idle), "no signal reached lane") &&
            contains(ipcfloor_last_error(idle), "within 300 ms"),
        "%s", ipcfloor_last_error(idle));

  ipcfloor_detach(idle);
  ipcfloor_detach(reader);
  ipcfloor_detach(writer);
  const int stopped = stop_engine();
  CHECK(WIFEXITED(stopped) && WEXITSTATUS(stopped) == 0, "serve --live exits 0 on SIGINT (status %d)", stopped);
  remove(full);
  remove(preload);
}

#define SERIES_A_BARS 1500
#define SERIES_B_BARS 2200
#define SERIES_GRID "6:200:20"

/* Writes `gen --bars BARS --seed SEED` to path and reads it back into close[bars]. */
static int generate(const char *path, int bars, int seed, double *close) {
  char command[1024];
  snprintf(command, sizeof command, "'%s' gen --bars %d --seed %d -o '%s' >/dev/null 2>&1", binary, bars, seed, path);
  CHECK(system(command) == 0, "%s", command);
  FILE *file = fopen(path, "rb");
  const int ok = file != NULL && fread(close, sizeof close[0], (size_t)bars, file) == (size_t)bars;
  CHECK(ok, "read %s", path);
  if (file != NULL) fclose(file);
  return ok;
}

/* An engine of two series, serve --data A --data B: the table, each series' bars, requests on the
 * series they name, and an index past the table. */
static void check_two_series(void) {
  static double a_close[SERIES_A_BARS], b_close[SERIES_B_BARS];
  char a_path[256], b_path[256], a_key[128], b_key[128], args[600];
  snprintf(a_key, sizeof a_key, "ipcfloor-ctest-%d-ES", (int)getpid());
  snprintf(b_key, sizeof b_key, "ipcfloor-ctest-%d-NQ", (int)getpid());
  snprintf(a_path, sizeof a_path, "/tmp/%s.f64", a_key);
  snprintf(b_path, sizeof b_path, "/tmp/%s.f64", b_key);
  if (!generate(a_path, SERIES_A_BARS, 21, a_close) || !generate(b_path, SERIES_B_BARS, 22, b_close)) return;

  /* The batch kernel on each file alone. */
  static struct reference_row a_rows[MAX_COMBOS], b_rows[MAX_COMBOS];
  snprintf(args, sizeof args, "--data '%s' --grid %s", a_path, SERIES_GRID);
  const size_t n = read_rows(args, a_rows, MAX_COMBOS);
  snprintf(args, sizeof args, "--data '%s' --grid %s", b_path, SERIES_GRID);
  const size_t n_b = read_rows(args, b_rows, MAX_COMBOS);
  CHECK(n == 20 && n_b == 20, "reference rows %zu %zu", n, n_b);
  if (n != 20 || n_b != 20) return;
  int differ = 0;
  for (size_t i = 0; i < n; ++i) differ += !same_double(a_rows[i].pnl, b_rows[i].pnl);
  CHECK(differ > 0, "the two series give different answers (else this test could not tell them apart)");

  char name[128];
  snprintf(name, sizeof name, "ipcfloor-ctest-two-%d", (int)getpid());
  char *argv[] = {(char *)binary, "serve", "--name", name, "--data", a_path, "--data", b_path,
                  "--wait", "backoff", "--lanes", "1", "--quiet", NULL};
  ipcfloor_client *c = spawn_and_attach(argv, name);
  CHECK(c != NULL, "attach to a two-series engine");
  if (c == NULL) return;

  /* The table: two series named after their files, each the file's bars, zero-copy. */
  CHECK(ipcfloor_series_count(c) == 2, "series count %u", (unsigned)ipcfloor_series_count(c));
  CHECK(ipcfloor_series_key(c, 0) != NULL && strcmp(ipcfloor_series_key(c, 0), a_key) == 0, "series 0 is %s",
        ipcfloor_series_key(c, 0));
  CHECK(ipcfloor_series_key(c, 1) != NULL && strcmp(ipcfloor_series_key(c, 1), b_key) == 0, "series 1 is %s",
        ipcfloor_series_key(c, 1));
  CHECK(ipcfloor_series_key(c, 2) == NULL, "no series 2");
  const double *main_close = NULL, *bars = NULL;
  CHECK(ipcfloor_series(c, &main_close) == SERIES_A_BARS, "the main series is A");
  CHECK(ipcfloor_series_at(c, 0, &bars) == SERIES_A_BARS && bars == main_close &&
            memcmp(bars, a_close, sizeof a_close) == 0,
        "series 0 holds A bit for bit, where ipcfloor_series shows it");
  bars = NULL;
  CHECK(ipcfloor_series_at(c, 1, &bars) == SERIES_B_BARS && bars != NULL && memcmp(bars, b_close, sizeof b_close) == 0,
        "series 1 holds B bit for bit");
  bars = b_close;
  CHECK(ipcfloor_series_at(c, 2, &bars) == 0 && bars == NULL, "series 2: no bars");
  CHECK(ipcfloor_series_at(c, 1, NULL) == SERIES_B_BARS, "close may be NULL");

  /* A sweep and backtests on series 1 equal sweep --inproc --data B; on series 0, --data A. */
  static int64_t grid[MAX_COMBOS][6];
  static double pnl[MAX_COMBOS];
  static int64_t trades[MAX_COMBOS];
  static int status[MAX_COMBOS];
  for (size_t i = 0; i < n; ++i) memcpy(grid[i], b_rows[i].params, sizeof grid[i]);
  const int64_t(*const_grid)[6] = (const int64_t(*)[6])grid;
  int refused = ipcfloor_sweep_on(c, 1, const_grid, n, pnl, trades, status);
  CHECK(refused == 0, "sweep on series 1: %d (%s)", refused, ipcfloor_last_error(c));
  for (size_t i = 0; i < n; ++i)
    CHECK(status[i] == IPCFLOOR_OK && same_double(pnl[i], b_rows[i].pnl) && trades[i] == b_rows[i].trades,
          "series 1, combo %zu (L=%" PRId64 "): pnl %.17g trades %" PRId64 ", want %.17g %" PRId64, i,
          b_rows[i].length, pnl[i], trades[i], b_rows[i].pnl, b_rows[i].trades);
  refused = ipcfloor_sweep_on(c, 0, const_grid, n, pnl, trades, status);
  CHECK(refused == 0, "sweep on series 0: %d", refused);
  for (size_t i = 0; i < n; ++i)
    CHECK(same_double(pnl[i], a_rows[i].pnl) && trades[i] == a_rows[i].trades, "series 0, combo %zu", i);
  for (size_t i = 0; i < n; i += 3) {
    double one_pnl = 0.0;
    int64_t one_trades = -1;
    CHECK(ipcfloor_backtest_on(c, 1, grid[i], &one_pnl, &one_trades) == IPCFLOOR_OK &&
              same_double(one_pnl, b_rows[i].pnl) && one_trades == b_rows[i].trades,
          "backtest_on series 1, combo %zu: %s", i, ipcfloor_last_error(c));
    CHECK(ipcfloor_backtest_on(c, 0, grid[i], &one_pnl, &one_trades) == IPCFLOOR_OK &&
              same_double(one_pnl, a_rows[i].pnl) && one_trades == a_rows[i].trades,
          "backtest_on series 0, combo %zu", i);
    CHECK(ipcfloor_backtest(c, grid[i], &one_pnl, &one_trades) == IPCFLOOR_OK && same_double(one_pnl, a_rows[i].pnl),
          "ipcfloor_backtest runs on series 0, combo %zu", i);
  }

  /* Windows are judged against the series named: L = 2000 fits B (2200 bars), not A (1500). */
  const int64_t long_window[6] = {3, 2000, 2, 1, 2, 3};
  double one_pnl = 0.0;
  int64_t one_trades = -1;
  CHECK(ipcfloor_backtest_on(c, 1, long_window, &one_pnl, &one_trades) == IPCFLOOR_OK, "L=2000 on series 1: %s",
        ipcfloor_last_error(c));
  CHECK(ipcfloor_backtest_on(c, 0, long_window, &one_pnl, &one_trades) == IPCFLOOR_E_WINDOW, "L=2000 on series 0");
  CHECK(contains(ipcfloor_last_error(c), "parameter L (position 1) is 2000, refused by strategy hma for a series of 1500 bars"), "%s",
        ipcfloor_last_error(c));
  const int64_t too_long[6] = {3, SERIES_B_BARS + 1, 2, 1, 2, 3};
  CHECK(ipcfloor_backtest_on(c, 1, too_long, &one_pnl, &one_trades) == IPCFLOOR_E_WINDOW, "L=2201 on series 1");
  CHECK(contains(ipcfloor_last_error(c), "on series 1 (") && contains(ipcfloor_last_error(c), b_key) &&
            contains(ipcfloor_last_error(c), "is 2201, refused by strategy hma for a series of 2200 bars"),
        "%s", ipcfloor_last_error(c));

  /* An index past the table: refused without a request, by its code and a sentence naming it. */
  one_pnl = 42.0;
  one_trades = 42;
  CHECK(ipcfloor_backtest_on(c, 2, grid[0], &one_pnl, &one_trades) == IPCFLOOR_E_NO_SUCH_SERIES &&
            one_pnl == 42.0 && one_trades == 42,
        "backtest on series 2");
  CHECK(contains(ipcfloor_last_error(c), name) && contains(ipcfloor_last_error(c), "holds no series 2") &&
            contains(ipcfloor_last_error(c), "it holds 2 series, indices 0 to 1"),
        "%s", ipcfloor_last_error(c));
  /* 256 would be series 0 if only the request's series byte were kept. */
  CHECK(ipcfloor_backtest_on(c, 256, grid[0], &one_pnl, &one_trades) == IPCFLOOR_E_NO_SUCH_SERIES,
        "backtest on series 256");
  CHECK(contains(ipcfloor_last_error(c), "holds no series 256"), "%s", ipcfloor_last_error(c));
  refused = ipcfloor_sweep_on(c, 2, const_grid, n, pnl, trades, status);
  CHECK(refused == IPCFLOOR_E_NO_SUCH_SERIES, "sweep on series 2: %d", refused);
  CHECK(status[0] == IPCFLOOR_E_NO_SUCH_SERIES && status[n - 1] == IPCFLOOR_E_NO_SUCH_SERIES && isnan(pnl[0]) &&
            trades[n - 1] == 0,
        "every combo of a sweep on series 2 carries the code");
  CHECK(ipcfloor_sweep_on(c, 2, const_grid, 0, NULL, NULL, NULL) == IPCFLOOR_E_NO_SUCH_SERIES,
        "an empty sweep on series 2");
  CHECK(ipcfloor_sweep_on(c, 1, const_grid, 0, NULL, NULL, NULL) == 0, "an empty sweep on series 1");
  CHECK(ipcfloor_backtest_on(c, 1, grid[0], &one_pnl, &one_trades) == IPCFLOOR_OK &&
            same_double(one_pnl, b_rows[0].pnl),
        "the client stays usable: %s", ipcfloor_last_error(c));

  ipcfloor_detach(c);
  const int stopped = stop_engine();
  CHECK(WIFEXITED(stopped) && WEXITSTATUS(stopped) == 0, "the two-series engine exits 0 on SIGINT (status %d)",
        stopped);
  remove(a_path);
  remove(b_path);
}

/* The engine publishes its serving cpu (serve's default: the last one this process may use) and
 * the cpus nearest it; pinning near it takes the first of them. Last of the checks on this
 * client: it leaves the calling thread pinned there. */
static void check_placement(ipcfloor_client *c) {
  const int32_t serving = ipcfloor_serving_cpu(c);
  CHECK(serving >= 0, "serving cpu %d", (int)serving);
  int32_t near[64];
  const size_t count = ipcfloor_near_cpus(c, near, 64);
  CHECK(ipcfloor_near_cpus(c, NULL, 0) == count, "the count without room to copy");
  CHECK(ipcfloor_serving_cpu(NULL) == -1 && ipcfloor_near_cpus(NULL, near, 64) == 0, "NULL client");
  for (size_t i = 0; i < count && i < 64; ++i) CHECK(near[i] != serving, "near cpu %d is the serving one", (int)near[i]);
  CHECK(ipcfloor_pin_near_engine(NULL, NULL) == IPCFLOOR_E_INVALID, "pin_near on NULL");
  int32_t cpu = -1;
  const int pinned = ipcfloor_pin_near_engine(c, &cpu);
  if (count == 0) {
    CHECK(pinned == IPCFLOOR_E_RESOURCE && contains(ipcfloor_last_error(c), "publishes no cpu"), "%s",
          ipcfloor_last_error(c));
    return;
  }
  CHECK(pinned == IPCFLOOR_OK && cpu == near[0], "pinned to cpu %d, nearest %d: %s", (int)cpu, (int)near[0],
          ipcfloor_last_error(c));
}

/* A sweep of the grid answered exactly as the reference. */
static int sweep_matches(ipcfloor_client *c, const int64_t (*grid)[6], size_t n, const struct reference_row *reference) {
  static double pnl[MAX_COMBOS];
  static int64_t trades[MAX_COMBOS];
  static int status[MAX_COMBOS];
  if (ipcfloor_sweep(c, grid, n, pnl, trades, status) != 0) return 0;
  for (size_t i = 0; i < n; ++i)
    if (status[i] != IPCFLOOR_OK || !same_double(pnl[i], reference[i].pnl) || trades[i] != reference[i].trades)
      return 0;
  return 1;
}

/* Interrupts: a sweep stopped between answers, then one stopped while the engine is stopped
 * (SIGSTOP: no answer comes), each with IPCFLOOR_E_INTERRUPTED; after each the client answers
 * the reference again, the answers the stopped sweep left owed dropped on the way. */
static void check_interrupts(ipcfloor_client *c, const int64_t (*grid)[6], size_t n,
                             const struct reference_row *reference) {
  struct interrupt_probe probe = {0, 1};
  CHECK(ipcfloor_set_interrupt(c, stop_after, &probe, 0) == IPCFLOOR_E_INVALID, "an interval of 0 is refused");
  CHECK(ipcfloor_set_interrupt(c, stop_after, &probe, 2000000000LL) == IPCFLOOR_E_INVALID, "2 s is past the range");
  CHECK(ipcfloor_set_interrupt(c, stop_after, &probe, 1000000) == IPCFLOOR_OK, "1 ms is in range");
  /* 1 s: no wait of this sweep lasts a slice, so the one ask is the one after the first answer
   * (a check just installed is asked at the first chance), which says stop. */
  CHECK(ipcfloor_set_interrupt(c, stop_after, &probe, 1000000000LL) == IPCFLOOR_OK, "1 s is in range");
  static double pnl[MAX_COMBOS];
  static int64_t trades[MAX_COMBOS];
  static int status[MAX_COMBOS];
  int got = ipcfloor_sweep(c, grid, n, pnl, trades, status);
  CHECK(got == IPCFLOOR_E_INTERRUPTED && probe.calls == 1, "a sweep stopped between answers: %d after %d calls",
        got, probe.calls);
  CHECK(status[0] == IPCFLOOR_OK && same_double(pnl[0], reference[0].pnl) && trades[0] == reference[0].trades,
        "the answer before the stop is kept");
  CHECK(status[n - 1] == IPCFLOOR_E_INTERRUPTED && isnan(pnl[n - 1]) && trades[n - 1] == 0,
        "the combos after it are marked interrupted: %d", status[n - 1]);
  CHECK(contains(ipcfloor_last_error(c), "interrupted") && contains(ipcfloor_last_error(c), "stays usable"), "%s",
        ipcfloor_last_error(c));
  CHECK(ipcfloor_set_interrupt(c, NULL, NULL, 0) == IPCFLOOR_OK, "remove the check");
  CHECK(sweep_matches(c, grid, n, reference), "after an interrupted sweep the next one answers the reference: %s",
        ipcfloor_last_error(c));

  /* The engine stopped: the sweep's wait asks the check every 10 ms and stops at the third ask,
   * long before its 5 s timeout would report the engine hung. */
  probe.calls = 0;
  probe.stop_at = 3;
  CHECK(ipcfloor_set_interrupt(c, stop_after, &probe, 10000000) == IPCFLOOR_OK, "10 ms");
  kill(engine, SIGSTOP);
  got = ipcfloor_sweep(c, grid, n, pnl, trades, status);
  kill(engine, SIGCONT);
  CHECK(got == IPCFLOOR_E_INTERRUPTED && probe.calls == 3, "a sweep on a stopped engine: %d after %d calls (%s)", got,
        probe.calls, ipcfloor_last_error(c));
  CHECK(ipcfloor_set_interrupt(c, NULL, NULL, 0) == IPCFLOOR_OK, "remove the check");
  double one_pnl = 0.0;
  int64_t one_trades = -1;
  CHECK(ipcfloor_backtest(c, grid[n - 1], &one_pnl, &one_trades) == IPCFLOOR_OK &&
            same_double(one_pnl, reference[n - 1].pnl) && one_trades == reference[n - 1].trades,
        "after the engine resumes, a backtest answers the reference: %s", ipcfloor_last_error(c));
  CHECK(sweep_matches(c, grid, n, reference), "and so does a sweep: %s", ipcfloor_last_error(c));
}

/* Fork: the child's calls on the parent's client are refused with IPCFLOOR_E_FORKED and a
 * sentence saying to attach again; its detach leaves the parent's lane alone; attached again, it
 * is served. The parent's client answers the reference before, during and after. */
static void check_fork(ipcfloor_client *c, const char *name, const int64_t (*grid)[6], size_t n,
                       const struct reference_row *reference) {
  fflush(NULL);
  const pid_t child = fork();
  if (child == 0) {
    int bad = 0;
    double pnl = 0.0;
    int64_t trades = 0;
    const int refused = ipcfloor_backtest(c, grid[0], &pnl, &trades);
    if (refused != IPCFLOOR_E_FORKED || !contains(ipcfloor_last_error(c), "attach again") ||
        !contains(ipcfloor_last_error(c), "forked")) {
      fprintf(stderr, "FAIL child: backtest on the parent's client: %d, %s\n", refused, ipcfloor_last_error(c));
      bad |= 1;
    }
    static double pnls[MAX_COMBOS];
    static int64_t tradeses[MAX_COMBOS];
    static int status[MAX_COMBOS];
    ipcfloor_signal signal;
    const int64_t in[6] = {1, 2, 3, 4, 5, 6};
    int64_t out[6];
    if (ipcfloor_sweep(c, grid, n, pnls, tradeses, status) != IPCFLOOR_E_FORKED ||
        status[0] != IPCFLOOR_E_FORKED || ipcfloor_echo(c, in, out) != IPCFLOOR_E_FORKED ||
        ipcfloor_poll_signal(c, &signal) != IPCFLOOR_E_FORKED || ipcfloor_snapshot(c) != IPCFLOOR_E_FORKED) {
      fprintf(stderr, "FAIL child: a call on the parent's client was not refused\n");
      bad |= 2;
    }
    if (ipcfloor_series(c, NULL) != BARS) bad |= 4; /* the mapping still reads */
    ipcfloor_detach(c);                              /* unmaps only: the lane stays the parent's */
    int err = 0;
    ipcfloor_client *own = attach_backoff(name, 5000000000LL, &err);
    if (own == NULL || ipcfloor_backtest(own, grid[0], &pnl, &trades) != IPCFLOOR_OK ||
        !same_double(pnl, reference[0].pnl) || trades != reference[0].trades) {
      fprintf(stderr, "FAIL child: attached again: %d, %s\n", err, own ? ipcfloor_last_error(own) : "no client");
      bad |= 8;
    }
    ipcfloor_detach(own);
    _exit(bad);
  }
  CHECK(child > 0, "fork: %s", strerror(errno));
  if (child <= 0) return;
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the child's checks (exit %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  CHECK(sweep_matches(c, grid, n, reference), "the parent's lane answers after the child left: %s",
        ipcfloor_last_error(c));
  CHECK(strcmp(ipcfloor_last_error(c), "") == 0 || !contains(ipcfloor_last_error(c), "impossible"), "%s",
        ipcfloor_last_error(c));
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

  check_interrupts(c, const_grid, n, reference);
  check_fork(c, name, const_grid, n, reference);

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
  CHECK(contains(ipcfloor_last_error(c), "combo 5 of 40") && contains(ipcfloor_last_error(c), "parameter L") &&
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
  CHECK(contains(ipcfloor_last_error(c), "parameter p (position 5) is 3001"), "%s", ipcfloor_last_error(c));
  CHECK(ipcfloor_backtest(c, grid[0], &one_pnl, &one_trades) == IPCFLOOR_OK && one_trades == reference[0].trades,
        "the client stays usable after a refusal");

  /* Echo: any 48 bytes come back. */
  const int64_t in[6] = {1, -2, 3, -4, INT64_MIN, INT64_MAX};
  int64_t out[6] = {0};
  CHECK(ipcfloor_echo(c, in, out) == IPCFLOOR_OK && memcmp(in, out, sizeof in) == 0, "echo");

  check_not_live(c, name);
  check_placement(c);

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

  check_live();
  check_two_series();

  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("C ABI: %zu combos through %s match sweep --inproc --json bit for bit; live signals match it after every "
         "append; two series each match sweep --inproc on their file; error paths hold\n", n, name);
  return 0;
}
