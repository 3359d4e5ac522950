// The rules every client interface shares, through the installed C ABI and C++ facade against a
// real engine: what a series call returns (the bars a BACKTEST runs on), and where a client
// looks for the engine's socket (IPCFLOOR_SOCKET_DIR).

#include <doctest/doctest.h>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <thread>

#include "bench/child_process.hpp"
#include "bench/engine_child.hpp"
#include "ipcfloor/client.hpp"
#include "ipcfloor/ipcfloor.h"

using namespace std::chrono_literals;

namespace {

// A combo whose largest window is `window` (the last one, p): the engine judges it against the
// series' bars.
void combo_reaching(std::int64_t window, std::int64_t params[6]) {
  const std::int64_t combo[6] = {3, 6, 2, 1, 2, window};
  for (int i = 0; i < 6; ++i) params[i] = combo[i];
}

}  // namespace

TEST_CASE("on a live engine, ipcfloor_series and Client::series cover every published bar, the bars a backtest uses") {
  const std::string name = ipcfloor::unique_segment_name("rule");
  ipcfloor::EngineChild engine(IPCFLOOR_BINARY, name,
                               {"--wait", "backoff", "--bars", "1000", "--live", "--capacity", "1100"});
  REQUIRE(engine.up());
  ipcfloor_options options;
  ipcfloor_options_init(&options);
  options.wait = IPCFLOOR_WAIT_BACKOFF;
  int err = 0;
  ipcfloor_client* writer = ipcfloor_attach_with(name.c_str(), &options, &err);
  REQUIRE_MESSAGE(writer != nullptr, ipcfloor_last_error(nullptr));
  for (int i = 0; i < 10; ++i) REQUIRE(ipcfloor_append(writer, 100.0 + i, 0, nullptr) == IPCFLOOR_OK);

  ipcfloor_client* reader = ipcfloor_attach_with(name.c_str(), &options, &err);
  REQUIRE(reader != nullptr);
  const double* close = nullptr;
  const double* published = nullptr;
  CHECK(ipcfloor_series(reader, &close) == 1010);
  CHECK(ipcfloor_bars(reader) == 1010);
  CHECK(ipcfloor_published_series(reader, &published) == 1010);
  CHECK(close == published);
  CHECK(close[1009] == 109.0);  // the last appended bar, bar 1009
  const double* first = nullptr;
  CHECK(ipcfloor_series_at(reader, 0, &first) == 1010);
  // A window as long as the series is what a backtest may use; one bar longer is not.
  std::int64_t params[6];
  double pnl = 0;
  std::int64_t trades = 0;
  combo_reaching(static_cast<std::int64_t>(ipcfloor_bars(reader)), params);
  CHECK(ipcfloor_backtest(reader, params, &pnl, &trades) == IPCFLOOR_OK);
  combo_reaching(static_cast<std::int64_t>(ipcfloor_bars(reader)) + 1, params);
  CHECK(ipcfloor_backtest(reader, params, &pnl, &trades) == IPCFLOOR_E_WINDOW);

  ipcfloor::ClientOptions facade_options;
  facade_options.wait = ipcfloor::Wait::backoff;
  auto facade = ipcfloor::Client::attach(name, facade_options);
  CHECK(facade.series().size() == 1010);
  CHECK(facade.bars() == 1010);
  CHECK(facade.series_at(0).size() == 1010);
  CHECK(facade.series()[1009] == 109.0);
  ipcfloor_detach(reader);
  ipcfloor_detach(writer);
}

TEST_CASE("IPCFLOOR_SOCKET_DIR moves the C ABI's and the C++ facade's attach to the engine's socket directory") {
  const std::string dir = "/tmp/" + ipcfloor::unique_segment_name("sockdir");
  std::filesystem::create_directories(dir);
  const std::string name = ipcfloor::unique_segment_name("sockdir");
  auto engine = ipcfloor::ChildProcess::spawn({IPCFLOOR_BINARY, "serve", "--name", name, "--socket-dir", dir, "--bars",
                                               "1000", "--wait", "backoff", "--hugepages", "off", "--quiet"});
  REQUIRE_MESSAGE(engine.has_value(), engine.error().message);
  REQUIRE(::setenv("IPCFLOOR_SOCKET_DIR", dir.c_str(), 1) == 0);
  ipcfloor_client* client = nullptr;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (client == nullptr && std::chrono::steady_clock::now() < deadline) {
    client = ipcfloor_attach(name.c_str(), nullptr);
    if (client == nullptr) std::this_thread::sleep_for(20ms);
  }
  REQUIRE_MESSAGE(client != nullptr, ipcfloor_last_error(nullptr));
  CHECK(ipcfloor_bars(client) == 1000);
  ipcfloor_detach(client);
  CHECK(ipcfloor::Client::attach(name).bars() == 1000);

  REQUIRE(::unsetenv("IPCFLOOR_SOCKET_DIR") == 0);
  int err = 0;
  CHECK(ipcfloor_attach(name.c_str(), &err) == nullptr);  // the default directory holds no such engine
  CHECK(err != IPCFLOOR_OK);
  engine->stop(SIGTERM);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a series' other columns through the C ABI and the C++ facade: as long as its closes, absent ones empty; "
          "an APPEND to it is refused naming why") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ipcfloor-rule-ohlc-" + std::to_string(::getpid()) + ".csv")).string();
  {
    std::string text = "\"Date\",\"High\",\"Low\",\"Close\"\n";
    for (int i = 0; i < 200; ++i)
      text += std::to_string(i) + "," + std::to_string(101 + i % 7) + "," + std::to_string(99 - i % 5) + "," +
              std::to_string(100 + i % 3) + "\n";
    FILE* file = std::fopen(path.c_str(), "w");
    REQUIRE(file != nullptr);
    std::fputs(text.c_str(), file);
    std::fclose(file);
  }
  const std::string name = ipcfloor::unique_segment_name("rule");
  ipcfloor::EngineChild engine(IPCFLOOR_BINARY, name,
                               {"--wait", "backoff", "--data", path, "--live", "--capacity", "300", "--workers", "0"});
  std::filesystem::remove(path);
  REQUIRE(engine.up());
  ipcfloor_options options;
  ipcfloor_options_init(&options);
  options.wait = IPCFLOOR_WAIT_BACKOFF;
  int err = 0;
  ipcfloor_client* c = ipcfloor_attach_with(name.c_str(), &options, &err);
  REQUIRE_MESSAGE(c != nullptr, ipcfloor_last_error(nullptr));
  CHECK(ipcfloor_series_columns(c, 0) == (IPCFLOOR_COLUMN_CLOSE | IPCFLOOR_COLUMN_HIGH | IPCFLOOR_COLUMN_LOW));
  CHECK(ipcfloor_series_columns(c, 1) == 0);
  const double* high = nullptr;
  const double* low = nullptr;
  const double* close = nullptr;
  REQUIRE(ipcfloor_series_column(c, 0, IPCFLOOR_COLUMN_HIGH, &high) == 200);
  REQUIRE(ipcfloor_series_column(c, 0, IPCFLOOR_COLUMN_LOW, &low) == 200);
  REQUIRE(ipcfloor_series_column(c, 0, IPCFLOOR_COLUMN_CLOSE, &close) == 200);
  CHECK(high[13] == 101 + 13 % 7);
  CHECK(low[13] == 99 - 13 % 5);
  CHECK(close[13] == 100 + 13 % 3);
  const double* absent = high;
  CHECK(ipcfloor_series_column(c, 0, IPCFLOOR_COLUMN_VOLUME, &absent) == 0);
  CHECK(absent == nullptr);
  CHECK(ipcfloor_series_column(c, 0, IPCFLOOR_COLUMN_HIGH | IPCFLOOR_COLUMN_LOW, &absent) == 0);
  CHECK(ipcfloor_series_column(c, 1, IPCFLOOR_COLUMN_CLOSE, &absent) == 0);
  std::uint64_t bars = 0;
  CHECK(ipcfloor_append(c, 100.0, 0, &bars) == IPCFLOOR_E_MISSING_COLUMN);
  CHECK_MESSAGE(std::string(ipcfloor_last_error(c)).find("an APPEND carries a close alone") != std::string::npos,
                ipcfloor_last_error(c));
  CHECK(ipcfloor_bars(c) == 200);

  ipcfloor::ClientOptions facade_options;
  facade_options.wait = ipcfloor::Wait::backoff;
  auto facade = ipcfloor::Client::attach(name, facade_options);
  CHECK(facade.series_columns(0) == ipcfloor_series_columns(c, 0));
  const std::span<const double> facade_high = facade.series_column(0, IPCFLOOR_COLUMN_HIGH);
  REQUIRE(facade_high.size() == 200);
  CHECK(std::equal(facade_high.begin(), facade_high.end(), high));
  CHECK(facade.series_column(0, IPCFLOOR_COLUMN_VOLUME).empty());
  ipcfloor_detach(c);
}
