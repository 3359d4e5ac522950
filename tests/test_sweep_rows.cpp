// What every way of running a sweep shares: the plan of rows, the named series, the split of
// the work by cost, and the rows as written.

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>

#include "cluster/work_split.hpp"
#include "data/gbm.hpp"
#include "data/series_io.hpp"
#include "data/series_set.hpp"
#include "data/sweep_rows.hpp"
#include "kernel/cost.hpp"

using namespace ipcfloor;

namespace {

std::string written(SweepFormat format, bool with_series, const std::vector<SweepRow>& rows) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = ::open_memstream(&buffer, &size);
  REQUIRE(out != nullptr);
  SweepWriter writer(out, format, with_series);
  writer.header();
  for (const SweepRow& row : rows) writer.row(row);
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

}  // namespace

TEST_CASE("split_by_cost gives every item to exactly one worker, and the loads end within one item of each other") {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::uint64_t> cost(1, 1'000'000);
  for (const std::uint32_t workers : {1u, 2u, 3u, 8u, 64u}) {
    std::vector<std::uint64_t> costs(500);
    for (auto& c : costs) c = cost(rng);
    const auto owner = split_by_cost(costs, workers);
    REQUIRE(owner.size() == costs.size());
    for (const std::uint32_t w : owner) CHECK(w < workers);
    const auto load = load_per_worker(costs, owner, workers);
    const auto [lightest, heaviest] = std::minmax_element(load.begin(), load.end());
    const std::uint64_t largest_item = *std::max_element(costs.begin(), costs.end());
    CAPTURE(workers);
    CHECK(*heaviest - *lightest <= largest_item);
    std::uint64_t total = 0;
    for (const auto l : load) total += l;
    CHECK(total == std::accumulate(costs.begin(), costs.end(), std::uint64_t{0}));
  }
}

TEST_CASE("split_by_cost is the same on every call, so ranks agree without talking, and beats a split by count") {
  // The default grid's combos on 150,000 bars: costs grow with the length.
  std::vector<std::uint64_t> costs;
  for (std::int64_t length = 6; length <= 200; length += 2)
    costs.push_back(backtest_cost(combo_from_length(length), 150'000));
  CHECK(split_by_cost(costs, 4) == split_by_cost(costs, 4));
  const auto by_cost = load_per_worker(costs, split_by_cost(costs, 4), 4);
  std::vector<std::uint32_t> by_count(costs.size());
  for (std::size_t i = 0; i < costs.size(); ++i) by_count[i] = static_cast<std::uint32_t>(i * 4 / costs.size());
  const auto counted = load_per_worker(costs, by_count, 4);
  CHECK(*std::max_element(by_cost.begin(), by_cost.end()) < *std::max_element(counted.begin(), counted.end()));
}

TEST_CASE("split_in_tiles keeps each worker to a few series and the loads within one tile of each other") {
  // 40 series x 300 combos, costs growing with the combo, split over 16 workers.
  std::vector<std::uint64_t> costs;
  std::vector<std::uint32_t> groups;
  for (std::uint32_t s = 0; s < 40; ++s)
    for (std::uint64_t c = 0; c < 300; ++c) {
      costs.push_back(1000 + 37 * c);
      groups.push_back(s);
    }
  const std::uint32_t workers = 16;
  const auto owner = split_in_tiles(costs, groups, workers, 8);
  REQUIRE(owner.size() == costs.size());
  std::vector<std::set<std::uint32_t>> series_of(workers);
  for (std::size_t i = 0; i < owner.size(); ++i) {
    REQUIRE(owner[i] < workers);
    series_of[owner[i]].insert(groups[i]);
  }
  // 128 tiles of about 94 items: a tile spans at most two series, a worker holds about 8 tiles.
  for (const auto& seen : series_of) CHECK(seen.size() <= 2 * 8 + 2);
  const std::size_t tile_items = (costs.size() + workers * 8 - 1) / (workers * 8);
  const std::uint64_t biggest_tile = tile_items * (1000 + 37 * 299);
  const auto load = load_per_worker(costs, owner, workers);
  const auto [lightest, heaviest] = std::minmax_element(load.begin(), load.end());
  CHECK(*heaviest - *lightest <= biggest_tile);
  CHECK(split_in_tiles(costs, groups, workers, 8) == owner);
}

TEST_CASE("a series set names files after their stem, picks one, all, or refuses naming what it has") {
  const auto dir = std::filesystem::temp_directory_path() / ("ipcfloor-series-set-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string a = (dir / "ES_2024.f64").string();
  const std::string b = (dir / "NQ.npy").string();
  REQUIRE(save_series(a, std::vector<double>{1, 2, 3}).has_value());
  REQUIRE(save_series(b, std::vector<double>{4, 5, 6, 7}).has_value());
  auto set = SeriesSet::make({a, b}, GbmParams{});
  REQUIRE(set.has_value());
  CHECK(set->names() == std::vector<std::string>{"ES_2024", "NQ"});
  CHECK(*set->select("all") == std::vector<std::size_t>{0, 1});
  CHECK(*set->select("NQ") == std::vector<std::size_t>{1});
  const auto ambiguous = set->select("");
  REQUIRE_FALSE(ambiguous.has_value());
  CHECK(ambiguous.error().message.find("ES_2024, NQ") != std::string::npos);
  const auto unknown = set->select("CL");
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().message.find("'CL'") != std::string::npos);
  CHECK(set->load(1)->close.size() == 4);
  const auto twice = SeriesSet::make({a, (dir / "sub.ES_2024.f64").string(), a}, GbmParams{});
  REQUIRE_FALSE(twice.has_value());
  CHECK(twice.error().message.find("'ES_2024'") != std::string::npos);
  auto generated = SeriesSet::make({}, GbmParams{});
  REQUIRE(generated.has_value());
  CHECK(generated->names() == std::vector<std::string>{"default"});
  CHECK(*generated->select("") == std::vector<std::size_t>{0});
  std::filesystem::remove_all(dir);
}

TEST_CASE("plan_rows keeps a combo file's bad rows in place, and admit_rows marks what the strategy refuses") {
  const auto path = std::filesystem::temp_directory_path() / ("ipcfloor-plan-" + std::to_string(::getpid()) + ".csv");
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("h,L,s,p3,p2,p\n3,6,2,1,2,3\nx,6,2,1,2,3\n50,100,10,17,25,50\n", f);
    std::fclose(f);
  }
  ComboSpec spec;
  spec.combos_path = path.string();
  auto plan = plan_rows(spec);
  REQUIRE(plan.has_value());
  REQUIRE(plan->size() == 3);
  const std::vector<RowVerdict> planned = verdicts_of(*plan);
  const auto row = [&](std::size_t i, const std::vector<RowVerdict>& verdicts) {
    return planned_row(*plan, i, verdicts[i], 60, &builtin(), "hma");
  };
  CHECK(planned[0] == RowVerdict::runnable);
  CHECK_FALSE(planned[1] == RowVerdict::runnable);
  CHECK(row(1, planned).error.rfind("bad_row: ", 0) == 0);
  const std::vector<RowVerdict> admitted = admit_rows(*plan, builtin(), 60);
  CHECK(admitted[0] == RowVerdict::runnable);
  CHECK_FALSE(admitted[2] == RowVerdict::runnable);
  CHECK(row(2, admitted).error == window_error(row(2, admitted), 60, &builtin(), "hma"));
  CHECK(row(2, admitted).error ==
        "window_out_of_range: line 4: params [50, 100, 10, 17, 25, 50]: window L (position 1) is 100, outside [1, 60] "
        "(the bars of the series)");
  CHECK(row(1, admitted).raw == "x,6,2,1,2,3");
  std::filesystem::remove(path);

  ComboSpec empty;
  empty.lengths_given = true;
  CHECK_FALSE(plan_rows(empty).has_value());
  ComboSpec grid;
  CHECK(plan_rows(grid)->size() == 80);
}

TEST_CASE("a sweep's plan of a combo file just under the 32 MiB bound, judged on a series, stays a few times the file") {
  const auto path = std::filesystem::temp_directory_path() / ("ipcfloor-dense-" + std::to_string(::getpid()) + ".csv");
  std::size_t bytes = 0;
  std::size_t rows = 0;
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    bytes += static_cast<std::size_t>(std::fprintf(f, "h,L,s,p3,p2,p\n"));
    for (; bytes + 12 < kMaxComboFileBytes - 100; ++rows) bytes += static_cast<std::size_t>(std::fprintf(f, "3,6,2,1,2,3\n"));
    std::fclose(f);
  }
  // In a child, so that its peak RSS is this plan's alone: the growth, in KiB, through the pipe.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    ComboSpec spec;
    spec.combos_path = path.string();
    const auto plan = plan_rows(spec);
    const auto verdicts = plan ? admit_rows(*plan, builtin(), 10) : std::vector<RowVerdict>{};
    rusage after{};
    ::getrusage(RUSAGE_SELF, &after);
    const long grew = plan && plan->size() == rows && verdicts[rows - 1] == RowVerdict::runnable
                          ? after.ru_maxrss - before.ru_maxrss
                          : -1;
    (void)!::write(fds[1], &grew, sizeof grew);
    ::_exit(0);
  }
  ::close(fds[1]);
  long grew_kib = -2;
  (void)!::read(fds[0], &grew_kib, sizeof grew_kib);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::filesystem::remove(path);
  REQUIRE_MESSAGE(grew_kib >= 0, "the plan of the dense file failed or was killed");
  // The text, 54 bytes a row and one verdict byte: about 5 times the file. Before: 36 times.
  CHECK_MESSAGE(static_cast<std::size_t>(grew_kib) * 1024 < 7 * bytes,
                "planning grew the peak RSS by " << grew_kib << " KiB for a " << bytes << "-byte file");
}

TEST_CASE("every JSON and CSV row names the series it ran on (name, bars, checksum); --series moves the name first") {
  SweepRow ok;
  ok.series = "ES";
  ok.series_bars = 2000;
  ok.series_checksum = 0x00aa8dbb76d06ab6ULL;
  ok.length = 6;
  ok.params = combo_from_length(6);
  ok.result = BacktestResult{-1.5, 7};
  SweepRow bad = ok;
  bad.result = {};
  bad.error = "window_out_of_range: \"x\"";
  SweepRow raw = ok;
  raw.error = "bad_row: line 2";
  raw.raw = "3,x";
  const std::string identity = "\"series_bars\":2000,\"series_checksum\":\"00aa8dbb76d06ab6\"";
  CHECK(written(SweepFormat::json, false, {ok}) ==
        "{\"L\":6,\"params\":[3,6,2,1,2,3],\"pnl\":-1.5,\"trades\":7,\"h\":3,\"s\":2,\"p3\":1,\"p2\":2,\"p\":3,\"series\":\"ES\"," + identity + "}\n");
  CHECK(written(SweepFormat::json, true, {ok}) ==
        "{\"series\":\"ES\",\"L\":6,\"params\":[3,6,2,1,2,3],\"pnl\":-1.5,\"trades\":7,\"h\":3,\"s\":2,\"p3\":1,\"p2\":2,\"p\":3," + identity + "}\n");
  CHECK(written(SweepFormat::json, true, {bad}) ==
        "{\"series\":\"ES\",\"L\":6,\"params\":[3,6,2,1,2,3],\"error\":\"window_out_of_range: \\\"x\\\"\",\"h\":3,\"s\":2,"
        "\"p3\":1,\"p2\":2,\"p\":3," + identity +
            "}\n");
  CHECK(written(SweepFormat::json, false, {raw}) ==
        "{\"raw\":\"3,x\",\"error\":\"bad_row: line 2\",\"series\":\"ES\"," + identity + "}\n");
  CHECK(written(SweepFormat::csv, false, {ok, raw}) ==
        "h,L,s,p3,p2,p,pnl,trades,error,raw,series,series_bars,series_checksum\n"
        "3,6,2,1,2,3,-1.5,7,,,\"ES\",2000,00aa8dbb76d06ab6\n"
        ",,,,,,,,\"bad_row: line 2\",\"3,x\",\"ES\",2000,00aa8dbb76d06ab6\n");
  CHECK(written(SweepFormat::csv, true, {bad}) ==
        "series,h,L,s,p3,p2,p,pnl,trades,error,raw,series_bars,series_checksum\n"
        "\"ES\",3,6,2,1,2,3,,,\"window_out_of_range: \"\"x\"\"\",,2000,00aa8dbb76d06ab6\n");
  CHECK(written(SweepFormat::table, true, {ok}).find("ES") != std::string::npos);
}
