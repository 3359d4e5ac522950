// An OHLCV series through the engine: `serve --data` of a CSV with Open, High, Low and Volume puts
// every column into the segment, where a client reads it back exactly; donchian (high and low)
// and vwma_cross (volume) answer through the engine what they answer in process on the same
// columns, bit for bit, on the serving thread and on a worker; the same strategies are refused
// missing_column, naming the column, on a close-only series; a live APPEND to an OHLCV series is
// refused missing_column and writes nothing; `status --json` lists each series' columns.
//
// The strategies are examples/strategies/donchian.c and vwma_cross.c, built by tests/CMakeLists.txt.

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/engine_child.hpp"
#include "clients/shm_client.hpp"
#include "data/gbm.hpp"
#include "data/series_io.hpp"
#include "kernel/kernel.hpp"
#include "kernel/strategy_loader.hpp"

namespace ipcfloor {
namespace {

namespace fs = std::filesystem;

std::string module(const std::string& name) { return std::string(IPCFLOOR_STRATEGY_DIR) + "/" + name + ".so"; }

// A CSV of `bars` GBM closes with an open, high, low and volume drawn around each (a vendor's
// shape: a BOM, quoted headers, a Date and an Adj Close column), or the closes alone.
struct CsvFile {
  CsvFile(std::size_t bars, bool ohlcv) {
    path = (fs::temp_directory_path() / fmt::format("ipcfloor-ohlcv-{}-{}.csv", ::getpid(), counter++)).string();
    GbmParams gbm;
    gbm.bars = bars;
    gbm.seed = 7;
    const auto close = generate_gbm(gbm);
    REQUIRE(close.has_value());
    std::string text = ohlcv ? "\xEF\xBB\xBF\"Date\",\"Open\",\"High\",\"Low\",\"Close\",\"Adj Close\",\"Volume\"\n"
                             : "Date,Close\n";
    for (std::size_t i = 0; i < close->size(); ++i) {
      const double c = (*close)[i];
      const double open = i == 0 ? c : (*close)[i - 1];
      const double wiggle = 0.00005 * static_cast<double>((i * 7919) % 13);
      const double high = std::max(open, c) * (1.0 + wiggle);
      const double low = std::min(open, c) * (1.0 - wiggle);
      const double volume = static_cast<double>((i * 104729) % 5000 + 100);
      text += ohlcv ? fmt::format("d{},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g}\n", i, open, high, low, c,
                                  c * 0.99, volume)
                    : fmt::format("d{},{:.17g}\n", i, c);
    }
    std::ofstream(path, std::ios::binary) << text;
  }
  CsvFile(const CsvFile&) = delete;
  CsvFile& operator=(const CsvFile&) = delete;
  ~CsvFile() {
    std::error_code ignored;
    fs::remove(path, ignored);
  }
  static inline int counter = 0;
  std::string path;
};

// A lane of engine `name`, waiting with backoff (the tests share two cores), or the failure.
Expected<ShmClient> attach(const std::string& name) {
  return ShmClient::connect(name, ShmClientOptions{.timeout = std::chrono::seconds(20), .wait = WaitMode::backoff});
}

Combo params(std::int64_t a, std::int64_t b) { return Combo{a, b, 0, 0, 0, 0}; }
Status status_of(const ResponseSlot& response) { return static_cast<Status>(response.status); }

ResponseSlot backtest(ShmClient& client, std::uint32_t strategy, const Combo& combo) {
  REQUIRE(client.call(Opcode::backtest, request_flags(0, strategy), payload_of(combo)) == CallStatus::ok);
  return client.answer();
}

// `ipcfloor ARGS` with stdout and stderr together.
std::string run_cli(const std::string& args) {
  std::string output;
  FILE* pipe = ::popen((std::string(IPCFLOOR_BINARY) + " " + args + " 2>&1 </dev/null").c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  ::pclose(pipe);
  return output;
}

}  // namespace

TEST_CASE("donchian on high and low and vwma_cross on volume answer through the engine what they answer in "
          "process, and every column reads back exactly") {
  const CsvFile csv(6000, true);
  const auto loaded = load_series_columns(csv.path);
  REQUIRE_MESSAGE(loaded.has_value(), (loaded ? "" : loaded.error().message));
  REQUIRE(loaded->columns() == (IPCFLOOR_COLUMN_CLOSE | IPCFLOOR_COLUMN_OPEN | IPCFLOOR_COLUMN_HIGH |
                                IPCFLOOR_COLUMN_LOW | IPCFLOOR_COLUMN_VOLUME));
  // --inline-cost 1: every BACKTEST goes to the worker; the default: the serving thread answers.
  for (const char* inline_cost : {"1", "default"}) {
    CAPTURE(inline_cost);
    std::vector<std::string> args{"--wait", "backoff", "--data", csv.path, "--workers", "1", "--strategy",
                                  module("donchian"), "--strategy", module("vwma_cross")};
    if (std::string(inline_cost) != "default") args.insert(args.end(), {"--inline-cost", inline_cost});
    EngineChild engine(IPCFLOOR_BINARY, unique_segment_name("ohlcv"), args);
    REQUIRE(engine.up());
    auto client = attach(engine.name());
    REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
    const Bars held = client->segment().bars_at(0);
    REQUIRE(held.columns() == loaded->columns());
    REQUIRE(held.size() == loaded->close.size());
    for (std::size_t k = 0; k < kColumnCount; ++k) {
      const auto column = static_cast<Column>(k);
      const std::vector<double>& want = loaded->column(column);
      CHECK(std::memcmp(held.column(column), want.data(), want.size() * sizeof(double)) == 0);
    }
    StrategyCatalog catalog;
    const auto check_close = strategy_check_series();
    REQUIRE(check_close.has_value());
    for (const char* name : {"donchian", "vwma_cross"}) {
      CAPTURE(name);
      auto strategy = catalog.load(module(name), *check_close);
      REQUIRE(strategy.has_value());
      const auto index = client->segment().find_strategy(name);
      REQUIRE(index.has_value());
      const std::vector<Combo> combos = std::string(name) == "donchian"
                                            ? std::vector<Combo>{params(20, 10), params(55, 20), params(10, 5), params(5, 3)}
                                            : std::vector<Combo>{params(5, 20), params(10, 40), params(20, 60), params(55, 120)};
      const auto expected = run_sweep(**strategy, loaded->bars(), combos, client->segment().header().fee, 1);
      REQUIRE_MESSAGE(expected.has_value(), (expected ? "" : expected.error().message));
      std::int64_t traded = 0;
      for (std::size_t i = 0; i < combos.size(); ++i) {
        CAPTURE(i);
        const ResponseSlot answer = backtest(*client, *index, combos[i]);
        REQUIRE(status_of(answer) == Status::ok);
        CHECK(std::bit_cast<std::uint64_t>(answer.pnl) == std::bit_cast<std::uint64_t>((*expected)[i].pnl));
        CHECK(answer.trades == (*expected)[i].trades);
        traded += answer.trades;
      }
      CHECK(traded > 0);
    }
  }
}

TEST_CASE("on a close-only series donchian and vwma_cross are refused missing_column, naming the column") {
  const CsvFile csv(1000, false);
  EngineChild engine(IPCFLOOR_BINARY, unique_segment_name("ohlcv"),
                     {"--wait", "backoff", "--data", csv.path, "--workers", "0", "--strategy", module("donchian"),
                      "--strategy", module("vwma_cross")});
  REQUIRE(engine.up());
  auto client = attach(engine.name());
  REQUIRE(client.has_value());
  CHECK(client->segment().bars_at(0).columns() == IPCFLOOR_COLUMN_CLOSE);
  const auto donchian = client->segment().find_strategy("donchian");
  const auto vwma = client->segment().find_strategy("vwma_cross");
  REQUIRE((donchian && vwma));
  const ResponseSlot refused_hl = backtest(*client, *donchian, params(20, 10));
  CHECK(status_of(refused_hl) == Status::missing_column);
  CHECK(refused_hl.extra[0] == IPCFLOOR_COLUMN_HIGH);
  const ResponseSlot refused_v = backtest(*client, *vwma, params(10, 40));
  CHECK(status_of(refused_v) == Status::missing_column);
  CHECK(refused_v.extra[0] == IPCFLOOR_COLUMN_VOLUME);
}

TEST_CASE("a live APPEND to an OHLCV series is refused missing_column and writes nothing; status lists the columns") {
  const CsvFile csv(500, true);
  const CsvFile closes(300, false);
  EngineChild engine(IPCFLOOR_BINARY, unique_segment_name("ohlcv"),
                     {"--wait", "backoff", "--data", csv.path, "--data", closes.path, "--live", "--capacity", "600",
                      "--workers", "0"});
  REQUIRE(engine.up());
  auto client = attach(engine.name());
  REQUIRE(client.has_value());
  ResponseSlot answer{};
  REQUIRE(client->append(101.5, 1, answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::missing_column);
  CHECK(answer.extra[0] == IPCFLOOR_COLUMN_OPEN);
  CHECK(answer.extra[1] == 500);
  CHECK(client->segment().published_series().size() == 500);
  CHECK(client->segment().published_bars().columns() == client->segment().bars_at(0).columns());

  const auto status = nlohmann::json::parse(run_cli(fmt::format("status --name {} --json", engine.name())));
  const std::vector<std::string> all{"close", "open", "high", "low", "volume"};
  CHECK(status["series"]["columns"].get<std::vector<std::string>>() == all);
  REQUIRE(status["series_table"].size() == 2);
  CHECK(status["series_table"][0]["columns"].get<std::vector<std::string>>() == all);
  CHECK(status["series_table"][1]["columns"].get<std::vector<std::string>>() == std::vector<std::string>{"close"});
  const std::string text = run_cli(fmt::format("status --name {}", engine.name()));
  CHECK_MESSAGE(text.find("columns close, open, high, low, volume") != std::string::npos, text);
}

}  // namespace ipcfloor
