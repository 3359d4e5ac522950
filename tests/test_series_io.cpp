// Series file I/O (data/series_io.hpp): exact round trips through every format, numpy
// interoperability, and one clear, fact-naming error per way a series file can be wrong.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "data/combo_io.hpp"
#include "data/series_io.hpp"

namespace fs = std::filesystem;
using ipcfloor::ErrorCode;
using ipcfloor::Expected;
using ipcfloor::SeriesFormat;

namespace {

// A fresh directory per test case, removed with everything in it afterwards.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            fmt::format("ipcfloor-series-io-{}-{}", ::getpid(), counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  [[nodiscard]] std::string file(std::string_view name) const { return (path_ / name).string(); }
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string le_bytes(const std::vector<double>& values) {
  std::string out;
  for (const double v : values) {
    const auto bits = std::bit_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xffU));
  }
  return out;
}

// A .npy built by hand, so every header variant can be tested without numpy.
std::string npy_bytes(std::string_view dict, std::string_view data, unsigned major = 1) {
  const std::size_t length_bytes = (major == 1) ? 2 : 4;
  std::string header(dict);
  const std::size_t unpadded = 8 + length_bytes + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  for (std::size_t i = 0; i < length_bytes; ++i) {
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xffU));
  }
  return out + header + std::string(data);
}

// A random walk with values that have no short decimal form, so CSV exactness is tested.
std::vector<double> sample_series(std::size_t n) {
  std::vector<double> close(n);
  std::uint64_t state = 0x9E3779B97F4A7C15U;
  double price = 100.0;
  for (double& c : close) {
    state = state * 6364136223846793005U + 1442695040888963407U;
    price *= std::exp((static_cast<double>(state >> 11) * 0x1p-53 - 0.5) * 0.01);
    c = price;
  }
  return close;
}

// Values at the edges of binary64 that a sloppy writer or parser would change.
std::vector<double> awkward_series() {
  return {std::numeric_limits<double>::denorm_min(),
          std::numeric_limits<double>::min(),
          std::numeric_limits<double>::max(),
          0.1,
          1.0 / 3.0,
          1e-300,
          123456789.12345679,
          std::nextafter(1.0, 2.0),
          100.029215};
}

void check_bitwise_equal(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("bar ", i, ": got ", fmt::format("{}", got[i]), ", want ", fmt::format("{}", want[i]));
    REQUIRE(std::bit_cast<std::uint64_t>(got[i]) == std::bit_cast<std::uint64_t>(want[i]));
  }
}

template <class T>
void check_error(const Expected<T>& result, ErrorCode code,
                 std::initializer_list<std::string_view> facts) {
  REQUIRE_FALSE(result.has_value());
  const std::string& message = result.error().message;
  INFO("message: ", message);
  CHECK(result.error().code == code);
  for (const std::string_view fact : facts) {
    INFO("expected the message to contain: ", std::string(fact));
    CHECK(message.find(fact) != std::string::npos);
  }
}

bool numpy_available() {
  static const bool available =
      fs::exists("/usr/bin/python3") &&
      std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return available;
}

// Runs a Python script with the temp directory as its argument; true when it exits 0.
bool run_python(const TempDir& dir, std::string_view script) {
  const std::string script_path = dir.file("check.py");
  write_bytes(script_path, script);
  const std::string command =
      fmt::format("/usr/bin/python3 '{}' '{}'", script_path, dir.path().string());
  return std::system(command.c_str()) == 0;
}

}  // namespace

TEST_CASE("tells the series format from the file extension, ignoring case") {
  CHECK(ipcfloor::format_from_path("data.csv").value() == SeriesFormat::csv);
  CHECK(ipcfloor::format_from_path("/tmp/x.y/DATA.CSV").value() == SeriesFormat::csv);
  CHECK(ipcfloor::format_from_path("close.f64").value() == SeriesFormat::f64);
  CHECK(ipcfloor::format_from_path("close.bin").value() == SeriesFormat::f64);
  CHECK(ipcfloor::format_from_path("close.Raw").value() == SeriesFormat::f64);
  CHECK(ipcfloor::format_from_path("series.npy").value() == SeriesFormat::npy);
}

TEST_CASE("rejects an unknown or missing extension and names the path") {
  check_error(ipcfloor::format_from_path("prices.txt"), ErrorCode::invalid_argument,
              {"prices.txt", "'.txt'", ".csv", ".npy"});
  check_error(ipcfloor::format_from_path("dir.npy/prices"), ErrorCode::invalid_argument,
              {"dir.npy/prices", "no file extension"});
  check_error(ipcfloor::load_series("prices.parquet"), ErrorCode::invalid_argument,
              {"prices.parquet"});
  check_error(ipcfloor::save_series("prices.json", std::vector<double>{1.0, 2.0}),
              ErrorCode::invalid_argument, {"prices.json"});
}

TEST_CASE("round-trips a series through raw float64 exactly") {
  const TempDir dir;
  for (const auto& series : {awkward_series(), sample_series(1000)}) {
    for (const char* name : {"close.f64", "close.bin", "close.raw"}) {
      const std::string path = dir.file(name);
      REQUIRE(ipcfloor::save_series(path, series).has_value());
      const auto loaded = ipcfloor::load_series(path);
      REQUIRE(loaded.has_value());
      check_bitwise_equal(*loaded, series);
    }
  }
}

TEST_CASE("round-trips a series through .npy exactly") {
  const TempDir dir;
  for (const auto& series : {awkward_series(), sample_series(1000)}) {
    const std::string path = dir.file("close.npy");
    REQUIRE(ipcfloor::save_series(path, series).has_value());
    const auto loaded = ipcfloor::load_series(path);
    REQUIRE(loaded.has_value());
    check_bitwise_equal(*loaded, series);
  }
}

TEST_CASE("round-trips a series through CSV exactly, with 17 significant digits") {
  const TempDir dir;
  for (const auto& series : {awkward_series(), sample_series(1000)}) {
    const std::string path = dir.file("close.csv");
    REQUIRE(ipcfloor::save_series(path, series).has_value());
    const auto loaded = ipcfloor::load_series(path);
    REQUIRE(loaded.has_value());
    check_bitwise_equal(*loaded, series);
  }
}

TEST_CASE("writes raw float64 as bare little-endian values") {
  const TempDir dir;
  const std::vector<double> series{100.0, 100.5, 99.25};
  REQUIRE(ipcfloor::save_series(dir.file("s.f64"), series).has_value());
  CHECK(read_bytes(dir.file("s.f64")) == le_bytes(series));
}

TEST_CASE("writes a .npy v1.0 '<f8' header padded to a multiple of 64 bytes, ending in a newline") {
  const TempDir dir;
  const std::vector<double> series{100.0, 100.5, 99.25};
  REQUIRE(ipcfloor::save_series(dir.file("s.npy"), series).has_value());
  const std::string bytes = read_bytes(dir.file("s.npy"));
  REQUIRE(bytes.size() > 10);
  CHECK(bytes.substr(0, 6) == std::string("\x93NUMPY", 6));
  CHECK(bytes[6] == '\x01');
  CHECK(bytes[7] == '\x00');
  const std::size_t header_length = static_cast<unsigned char>(bytes[8]) +
                                    256U * static_cast<unsigned char>(bytes[9]);
  const std::size_t data_offset = 10 + header_length;
  CHECK(data_offset % 64 == 0);
  REQUIRE(bytes.size() == data_offset + 24);
  const std::string header = bytes.substr(10, header_length);
  CHECK(header.back() == '\n');
  CHECK(header.find("'descr': '<f8'") != std::string::npos);
  CHECK(header.find("'fortran_order': False") != std::string::npos);
  CHECK(header.find("'shape': (3,)") != std::string::npos);
  CHECK(bytes.substr(data_offset) == le_bytes(series));
}

TEST_CASE("writes CSV as a close header and one 17-digit value per line") {
  const TempDir dir;
  REQUIRE(ipcfloor::save_series(dir.file("s.csv"), std::vector<double>{100.0, 0.1, 2.5}).has_value());
  CHECK(read_bytes(dir.file("s.csv")) == "close\n100\n0.10000000000000001\n2.5\n");
}

TEST_CASE("reads the close column among others, with quoted mixed-case headers, CRLF and trailing blank lines") {
  const TempDir dir;
  const std::string path = dir.file("bars.csv");
  write_bytes(path,
              "\"Date\",\"Open\",\"CLOSE\",Volume\r\n"
              "2024-01-02,1,100.5,10\r\n"
              "2024-01-03,1,101.25,11\r\n"
              "\r\n"
              "\r\n");
  const auto loaded = ipcfloor::load_series(path);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == std::vector<double>{100.5, 101.25});
}

TEST_CASE("reads CSV cells holding quoted commas, spaces, a leading '+' and a UTF-8 BOM") {
  const TempDir dir;
  const std::string path = dir.file("bars.csv");
  write_bytes(path,
              "\xEF\xBB\xBF" "date , 'Close'\n"
              "\"Jan 2, 2024\", 1.5\n"
              "\"Jan 3, 2024\",\"+2.5\"");  // and no newline at the end
  const auto loaded = ipcfloor::load_series(path);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == std::vector<double>{1.5, 2.5});
}

TEST_CASE("names the bar index and value of a negative close") {
  const std::vector<double> series{100.0, 101.0, -3.5, 102.0};
  check_error(ipcfloor::validate_series(series, "data.csv"), ErrorCode::bad_data,
              {"data.csv: bar 2 is -3.5", "finite and positive"});
}

TEST_CASE("names the bar index of a NaN, an infinite and a zero close") {
  std::vector<double> series(10, 100.0);
  SUBCASE("NaN") {
    series[7] = std::numeric_limits<double>::quiet_NaN();
    check_error(ipcfloor::validate_series(series, "s.npy"), ErrorCode::bad_data,
                {"s.npy", "bar 7 is nan"});
  }
  SUBCASE("infinity") {
    series[0] = std::numeric_limits<double>::infinity();
    check_error(ipcfloor::validate_series(series, "s.npy"), ErrorCode::bad_data,
                {"s.npy", "bar 0 is inf"});
  }
  SUBCASE("zero") {
    series[9] = 0.0;
    check_error(ipcfloor::validate_series(series, "s.npy"), ErrorCode::bad_data,
                {"s.npy", "bar 9 is 0"});
  }
}

TEST_CASE("rejects a series of fewer than 2 bars") {
  check_error(ipcfloor::validate_series(std::vector<double>{100.0}, "one.f64"),
              ErrorCode::bad_data, {"one.f64", "1 bar", "at least 2"});
  check_error(ipcfloor::validate_series({}, "none.npy"), ErrorCode::bad_data,
              {"none.npy", "0 bars", "at least 2"});
}

TEST_CASE("accepts a series of finite positive bars") {
  CHECK(ipcfloor::validate_series(awkward_series(), "edge values").has_value());
  CHECK(ipcfloor::validate_series(sample_series(150'000), "sample").has_value());
}

TEST_CASE("load_series validates the bars and names the file, bar index and value") {
  const TempDir dir;
  auto series = sample_series(2000);
  series[1234] = -3.5;
  for (const char* name : {"bad.csv", "bad.f64", "bad.npy"}) {
    const std::string path = dir.file(name);
    REQUIRE(ipcfloor::save_series(path, series).has_value());
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path + ": bar 1234 is -3.5; every close must be finite and positive"});
  }
}

TEST_CASE("reports a missing file with its path and the OS reason, as bad input") {
  const TempDir dir;
  const std::string path = dir.file("absent.csv");
  check_error(ipcfloor::load_series(path), ErrorCode::invalid_argument,
              {path, "No such file or directory"});
}

TEST_CASE("reports an unreadable file with its path and the OS reason") {
  const TempDir dir;
  SUBCASE("a directory") {
    const std::string path = dir.file("folder.f64");
    fs::create_directory(path);
    check_error(ipcfloor::load_series(path), ErrorCode::invalid_argument, {path, "is a directory"});
  }
  SUBCASE("no read permission") {
    if (::geteuid() == 0) {
      MESSAGE("skipped: root reads files whatever their mode");
      return;
    }
    const std::string path = dir.file("locked.npy");
    write_bytes(path, "x");
    ::chmod(path.c_str(), 0);
    check_error(ipcfloor::load_series(path), ErrorCode::permission, {path, "Permission denied"});
  }
}

TEST_CASE("rejects an empty file in every format") {
  const TempDir dir;
  for (const char* name : {"empty.csv", "empty.f64", "empty.npy"}) {
    const std::string path = dir.file(name);
    write_bytes(path, "");
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data, {path, "empty"});
  }
}

TEST_CASE("rejects a raw file whose size is not a whole number of float64 values") {
  const TempDir dir;
  const std::string path = dir.file("cut.f64");
  write_bytes(path, le_bytes(sample_series(150)) + "abc");  // 1203 bytes
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "truncated: 1203 bytes is not a whole number of float64 values"});
}

TEST_CASE("rejects a .npy with bad magic") {
  const TempDir dir;
  const std::string path = dir.file("fake.npy");
  write_bytes(path, "close\n1.0\n2.0\n");
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data, {path, "bad magic", "close"});
}

TEST_CASE("rejects a .npy whose header is truncated") {
  const TempDir dir;
  const std::string path = dir.file("cut.npy");
  const std::string whole = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                      le_bytes({1.0, 2.0}));
  SUBCASE("inside the preamble") {
    write_bytes(path, whole.substr(0, 9));
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "truncated header", "9 bytes"});
  }
  SUBCASE("inside the header dict") {
    write_bytes(path, whole.substr(0, 40));
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "truncated header", "says 118 bytes", "only 30"});
  }
}

TEST_CASE("rejects a .npy whose data is shorter than its shape says") {
  const TempDir dir;
  const std::string path = dir.file("short.npy");
  write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (10,), }",
                              le_bytes(sample_series(9))));
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "truncated", "shape (10,)", "only 72 bytes"});
}

TEST_CASE("rejects a .npy with stray bytes after the data its shape declares") {
  const TempDir dir;
  const std::string path = dir.file("long.npy");
  write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
                              le_bytes(sample_series(4))));
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "8 stray bytes", "shape (3,)"});
}

TEST_CASE("rejects a big-endian npy and names the dtype") {
  const TempDir dir;
  const std::string path = dir.file("be.npy");
  write_bytes(path, npy_bytes("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }",
                              std::string(16, '\x40')));
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "'>f8' (big-endian float64)", "'<f8'"});
}

TEST_CASE("rejects a float32, int64 or close-less structured npy and names the dtype") {
  const TempDir dir;
  const std::string path = dir.file("typed.npy");
  SUBCASE("float32") {
    write_bytes(path, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                                std::string(8, '\x40')));
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "'<f4' (little-endian float32)"});
  }
  SUBCASE("int64") {
    write_bytes(path, npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
                                std::string(16, '\x01')));
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "'<i8' (little-endian int64)"});
  }
  SUBCASE("structured without a close field") {
    write_bytes(path, npy_bytes("{'descr': [('price', '<f8')], 'fortran_order': False, "
                                "'shape': (2,), }",
                                std::string(16, '\x40')));
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "no 'close' field", "'price'", "--column"});
  }
}

TEST_CASE("rejects a Fortran-order npy") {
  const TempDir dir;
  const std::string path = dir.file("fortran.npy");
  write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': True, 'shape': (2,), }",
                              le_bytes({1.0, 2.0})));
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "fortran_order is True", "C order"});
}

TEST_CASE("rejects a 2-D npy, even one with a single column, naming its shape") {
  const TempDir dir;
  const std::string path = dir.file("column.npy");
  write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 1), }",
                              le_bytes({1.0, 2.0, 3.0})));
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "shape (3, 1)", "2-D", "1-D"});
}

TEST_CASE("a 2-D npy's hint names a column of closes, never arr.ravel(), which interleaves the columns") {
  const TempDir dir;
  const std::string path = dir.file("ohlc.npy");
  write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 4), }",
                              le_bytes({1.0, 2.0, 0.5, 1.5, 1.5, 2.5, 1.0, 2.0})));
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "shape (2, 4)", "arr[:, k]", "k in 0..3", "interleave"});
  const auto error = ipcfloor::load_series(path).error().message;
  CHECK_MESSAGE(error.find("save arr.ravel()") == std::string::npos, error);
  // One column: flattening it is right, and the hint says so.
  write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 1), }",
                              le_bytes({1.0, 2.0, 3.0})));
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data, {"one series", "arr.ravel()"});
}

TEST_CASE("--column picks a CSV's column of closes by name, whatever its case, and is refused for a .npy") {
  const TempDir dir;
  const std::string path = dir.file("vendor.csv");
  write_bytes(path, "Date,Close,\"Adj Close\",PX_LAST\n2024-01-02,10,9.5,11\n2024-01-03,12,11.5,13\n");
  const auto adjusted = ipcfloor::load_series(path, "adj close");
  REQUIRE_MESSAGE(adjusted.has_value(), adjusted.error().message);
  CHECK(*adjusted == std::vector<double>{9.5, 11.5});
  const auto last = ipcfloor::load_series(path, "PX_LAST");
  REQUIRE(last.has_value());
  CHECK(*last == std::vector<double>{11.0, 13.0});
  const auto close = ipcfloor::load_series(path);
  REQUIRE(close.has_value());
  CHECK(*close == std::vector<double>{10.0, 12.0});
  check_error(ipcfloor::load_series(path, "Volume"), ErrorCode::bad_data,
              {path, "no 'Volume' column", "'Date', 'Close', 'Adj Close', 'PX_LAST'"});
  const std::string npy = dir.file("series.npy");
  REQUIRE(ipcfloor::save_series(npy, std::vector<double>{1.0, 2.0}).has_value());
  check_error(ipcfloor::load_series(npy, "close"), ErrorCode::invalid_argument, {"--column", npy, ".npy"});
}

// A little-endian int64 as a .npy stores it.
std::string le_int64(std::int64_t value) {
  std::string out;
  const auto bits = static_cast<std::uint64_t>(value);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xffU));
  return out;
}

TEST_CASE("reads a vendor's OHLCV CSV: a BOM, quoted mixed-case headers in any order, Adj Close beside Close") {
  const TempDir dir;
  const std::string path = dir.file("yahoo.csv");
  write_bytes(path,
              "\xEF\xBB\xBF\"Date\",\"VOLUME\",\"low\",\"High\",\"Adj Close\",\"Close\",\"Open\"\r\n"
              "2024-01-02,1200,99.5,101.25,98.75,100.5,100\r\n"
              "2024-01-03,0,100,102,99.25,101,100.75\r\n");
  const auto series = ipcfloor::load_series_columns(path);
  REQUIRE_MESSAGE(series.has_value(), series.error().message);
  CHECK(series->columns() == (IPCFLOOR_COLUMN_CLOSE | IPCFLOOR_COLUMN_OPEN | IPCFLOOR_COLUMN_HIGH |
                              IPCFLOOR_COLUMN_LOW | IPCFLOOR_COLUMN_VOLUME));
  CHECK(series->close == std::vector<double>{100.5, 101.0});
  CHECK(series->open == std::vector<double>{100.0, 100.75});
  CHECK(series->high == std::vector<double>{101.25, 102.0});
  CHECK(series->low == std::vector<double>{99.5, 100.0});
  CHECK(series->volume == std::vector<double>{1200.0, 0.0});
  // --column picks the close; the other columns keep their own names.
  const auto adjusted = ipcfloor::load_series_columns(path, "adj close");
  REQUIRE_MESSAGE(adjusted.has_value(), adjusted.error().message);
  CHECK(adjusted->close == std::vector<double>{98.75, 99.25});
  CHECK(adjusted->high == std::vector<double>{101.25, 102.0});
  CHECK(adjusted->volume == std::vector<double>{1200.0, 0.0});
  // The closes alone are what load_series gives.
  CHECK(ipcfloor::load_series(path).value() == std::vector<double>{100.5, 101.0});
}

TEST_CASE("an OHLC CSV without a Volume column has no volume, and a close-only CSV has only close") {
  const TempDir dir;
  const std::string path = dir.file("ohlc.csv");
  write_bytes(path, "Time,Open,High,Low,Close\n09:30,10,11,9,10.5\n09:31,10.5,12,10,11\n");
  const auto series = ipcfloor::load_series_columns(path);
  REQUIRE_MESSAGE(series.has_value(), series.error().message);
  CHECK(series->columns() == (IPCFLOOR_COLUMN_CLOSE | IPCFLOOR_COLUMN_OPEN | IPCFLOOR_COLUMN_HIGH | IPCFLOOR_COLUMN_LOW));
  CHECK(series->volume.empty());
  CHECK(series->bars().volume == nullptr);
  CHECK(series->bars().high != nullptr);
  write_bytes(path, "date,close\n2024-01-02,10\n2024-01-03,11\n");
  const auto closes = ipcfloor::load_series_columns(path);
  REQUIRE(closes.has_value());
  CHECK(closes->columns() == IPCFLOOR_COLUMN_CLOSE);
}

TEST_CASE("a bad OHLCV cell or bar is refused naming the file, the line and the column") {
  const TempDir dir;
  const std::string path = dir.file("bad.csv");
  const std::string header = "Date,Open,High,Low,Close,Volume\n2024-01-02,10,11,9,10.5,100\n";
  write_bytes(path, header + "2024-01-03,10,abc,9,10.5,100\n");
  check_error(ipcfloor::load_series_columns(path), ErrorCode::bad_data, {path, "line 3", "high cell 'abc'"});
  write_bytes(path, header + "2024-01-03,10,11,,10.5,100\n");
  check_error(ipcfloor::load_series_columns(path), ErrorCode::bad_data, {path, "line 3", "empty low cell"});
  write_bytes(path, header + "2024-01-03,10,8.5,9,10.5,100\n");
  check_error(ipcfloor::load_series_columns(path), ErrorCode::bad_data,
              {path, "bar 1", "line 3", "high 8.5 is below its low 9"});
  write_bytes(path, "\"Date\",\"Volume\",\"Close\"\n2024-01-02,15,10\n2024-01-03,-5,10.5\n");
  check_error(ipcfloor::load_series_columns(path), ErrorCode::bad_data, {path, "bar 1", "line 3", "volume is -5"});
  write_bytes(path, header + "2024-01-03,0,11,9,10.5,5\n");
  check_error(ipcfloor::load_series_columns(path), ErrorCode::bad_data, {path, "bar 1", "line 3", "open is 0"});
  write_bytes(path, "Date,High,Close,high\n2024-01-02,11,10,12\n");
  check_error(ipcfloor::load_series_columns(path), ErrorCode::bad_data,
              {path, "two 'high' columns", "columns 2 and 4"});
}

TEST_CASE("reads a structured .npy by field name, a volume of int64 too, and still a plain '<f8' one") {
  const TempDir dir;
  const std::string path = dir.file("ohlcv.npy");
  std::string records;
  for (const auto& [close, high, low, volume] :
       {std::tuple{10.5, 11.0, 9.0, std::int64_t{100}}, std::tuple{11.0, 12.0, 10.0, std::int64_t{0}}}) {
    records += le_bytes({high}) + le_int64(volume) + le_bytes({close}) + std::string(4, '\0') + le_bytes({low});
  }
  write_bytes(path, npy_bytes("{'descr': [('High', '<f8'), ('volume', '<i8'), ('close', '<f8'), ('', '|V4'), "
                              "('low', '<f8')], 'fortran_order': False, 'shape': (2,), }",
                              records));
  const auto series = ipcfloor::load_series_columns(path);
  REQUIRE_MESSAGE(series.has_value(), series.error().message);
  CHECK(series->columns() == (IPCFLOOR_COLUMN_CLOSE | IPCFLOOR_COLUMN_HIGH | IPCFLOOR_COLUMN_LOW | IPCFLOOR_COLUMN_VOLUME));
  CHECK(series->close == std::vector<double>{10.5, 11.0});
  CHECK(series->high == std::vector<double>{11.0, 12.0});
  CHECK(series->low == std::vector<double>{9.0, 10.0});
  CHECK(series->volume == std::vector<double>{100.0, 0.0});
  const auto by_column = ipcfloor::load_series_columns(path, "LOW");
  REQUIRE(by_column.has_value());
  CHECK(by_column->close == std::vector<double>{9.0, 10.0});

  write_bytes(path, npy_bytes("{'descr': [('close', '<f8'), ('high', '<f4')], 'fortran_order': False, "
                              "'shape': (1,), }",
                              le_bytes({10.0}) + std::string(4, '\0')));
  check_error(ipcfloor::load_series_columns(path), ErrorCode::bad_data, {path, "field 'high'", "'<f4'"});
  write_bytes(path, npy_bytes("{'descr': [('close', '<f8'), ('high', '<f8')], 'fortran_order': False, "
                              "'shape': (2,), }",
                              le_bytes({10.0, 11.0})));
  check_error(ipcfloor::load_series_columns(path), ErrorCode::bad_data, {path, "truncated", "records"});

  const std::string plain = dir.file("plain.npy");
  REQUIRE(ipcfloor::save_series(plain, std::vector<double>{1.0, 2.0}).has_value());
  const auto closes = ipcfloor::load_series_columns(plain);
  REQUIRE(closes.has_value());
  CHECK(closes->columns() == IPCFLOOR_COLUMN_CLOSE);
  CHECK(closes->close == std::vector<double>{1.0, 2.0});
}

TEST_CASE("a headerless single column of closes is a series; numbers in several columns need a header") {
  const TempDir dir;
  const std::string path = dir.file("bare.csv");
  write_bytes(path, "101.5\n102\n+103.25\n\n");
  const auto loaded = ipcfloor::load_series(path);
  REQUIRE_MESSAGE(loaded.has_value(), loaded.error().message);
  CHECK(*loaded == std::vector<double>{101.5, 102.0, 103.25});
  check_error(ipcfloor::load_series(path, "close"), ErrorCode::bad_data, {path, "--column 'close'", "no header row"});
  write_bytes(path, "101.5\n102,3\n");
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data, {path, "line 2 has 2 cells", "headerless single"});
  write_bytes(path, "101.5,3\n102,4\n");
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data, {path, "line 1 holds 2 numbers", "header row"});
}

// The close a CsvBarStream took from one line, nullopt for a header or blank line (or an error).
std::optional<double> close_of(const Expected<std::optional<ipcfloor::Bar>>& taken) {
  if (!taken || !*taken) return std::nullopt;
  return (*taken)->close;
}

TEST_CASE("a CSV read line by line follows the rule of a CSV file: header or none, --column, each bad line named") {
  ipcfloor::CsvBarStream bare({}, "standard input");
  CHECK(bare.take("").value() == std::nullopt);
  CHECK(close_of(bare.take("101.5")) == std::optional<double>(101.5));
  CHECK(close_of(bare.take(" 102 ")) == std::optional<double>(102.0));
  const auto two_cells = bare.take("103,4");
  REQUIRE_FALSE(two_cells.has_value());
  CHECK_MESSAGE(two_cells.error().message.find("standard input: line 4 has 2 cells") != std::string::npos,
                two_cells.error().message);

  ipcfloor::CsvBarStream header({}, "standard input");
  CHECK(header.take("\xEF\xBB\xBF" "date,Close").value() == std::nullopt);
  CHECK(close_of(header.take("2024-01-02,99.5")) == std::optional<double>(99.5));
  const auto word = header.take("2024-01-03,abc");
  REQUIRE_FALSE(word.has_value());
  CHECK(word.error().code == ErrorCode::bad_data);
  CHECK_MESSAGE(word.error().message.find("line 3: the close cell 'abc' is not a number") != std::string::npos,
                word.error().message);

  ipcfloor::CsvBarStream vendor("Adj Close", "standard input");
  CHECK(vendor.take("Date,Close,Adj Close").value() == std::nullopt);
  CHECK(close_of(vendor.take("2024-01-02,10,9.5")) == std::optional<double>(9.5));
  ipcfloor::CsvBarStream missing("PX_LAST", "standard input");
  const auto absent = missing.take("date,close");
  REQUIRE_FALSE(absent.has_value());
  CHECK(absent.error().message.find("no 'PX_LAST' column") != std::string::npos);
}

TEST_CASE("a CSV read line by line keeps every OHLCV column and refuses a bar whose high is below its low") {
  ipcfloor::CsvBarStream stream({}, "standard input");
  CHECK(stream.take("\xEF\xBB\xBF\"date\",\"Close\",\"HIGH\",\"Low\"").value() == std::nullopt);
  CHECK(stream.columns() == (IPCFLOOR_COLUMN_CLOSE | IPCFLOOR_COLUMN_HIGH | IPCFLOOR_COLUMN_LOW));
  const auto bar = stream.take("2024-01-02,10.5,11,9.75");
  REQUIRE_MESSAGE(bar.has_value(), bar.error().message);
  REQUIRE(bar->has_value());
  CHECK((*bar)->close == 10.5);
  CHECK((*bar)->high == 11.0);
  CHECK((*bar)->low == 9.75);
  const auto crossed = stream.take("2024-01-03,10.5,9,9.75");
  REQUIRE_FALSE(crossed.has_value());
  CHECK_MESSAGE(crossed.error().message.find("standard input: line 3: its high 9 is below its low 9.75") !=
                    std::string::npos,
                crossed.error().message);
}

TEST_CASE("rejects a .npy whose header is not a well-formed dict") {
  const TempDir dir;
  const std::string path = dir.file("garbled.npy");
  SUBCASE("unclosed dict") {
    write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,)",
                                le_bytes({1.0, 2.0})));
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "malformed .npy header"});
  }
  SUBCASE("missing shape") {
    write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False}",
                                le_bytes({1.0, 2.0})));
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "malformed .npy header", "'shape'"});
  }
  SUBCASE("negative length") {
    write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (-2,), }",
                                le_bytes({1.0, 2.0})));
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "shape (-2,)", "non-negative"});
  }
  SUBCASE("unknown version") {
    std::string bytes = npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                                  le_bytes({1.0, 2.0}));
    bytes[6] = '\x07';
    write_bytes(path, bytes);
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data, {path, "version 7.0"});
  }
}

TEST_CASE("reads .npy format versions 2.0 and 3.0 and Python 2 style shapes") {
  const TempDir dir;
  const std::string path = dir.file("versions.npy");
  const std::vector<double> series{100.0, 101.5, 99.75};
  for (const unsigned major : {2U, 3U}) {
    write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
                                le_bytes(series), major));
    const auto loaded = ipcfloor::load_series(path);
    REQUIRE(loaded.has_value());
    CHECK(*loaded == series);
  }
  write_bytes(path, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3L,), }",
                              le_bytes(series)));
  const auto loaded = ipcfloor::load_series(path);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == series);
}

TEST_CASE("rejects a CSV without a close column and lists the columns it found") {
  const TempDir dir;
  const std::string path = dir.file("ohlc.csv");
  write_bytes(path, "date,open,high,\"Adj Close\"\n2024-01-02,1,2,3\n");
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "no 'close' column", "'date', 'open', 'high', 'Adj Close'"});
}

TEST_CASE("rejects a CSV with two close columns") {
  const TempDir dir;
  const std::string path = dir.file("twice.csv");
  write_bytes(path, "close,open,Close\n1,2,3\n");
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "two 'close' columns", "columns 1 and 3"});
}

TEST_CASE("names the line and text of a non-numeric close cell") {
  const TempDir dir;
  const std::string path = dir.file("words.csv");
  SUBCASE("a word") {
    write_bytes(path, "close\n1.5\n2.5\nabc\n3.5\n");
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "line 4", "'abc' is not a number"});
  }
  SUBCASE("a number with trailing text") {
    write_bytes(path, "date,close\r\nd1,1.5\r\nd2,2.5USD\r\n");
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "line 3", "'2.5USD' is not a number"});
  }
  SUBCASE("a number beyond float64") {
    write_bytes(path, "close\n1.5\n1e999\n");
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "line 3", "'1e999'", "float64 range"});
  }
}

TEST_CASE("names the line and text of a row with a missing or empty close cell") {
  const TempDir dir;
  const std::string path = dir.file("holes.csv");
  SUBCASE("missing") {
    write_bytes(path, "date,close\nd1,1.5\nd2\nd3,2.5\n");
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "line 3 has no close cell", "column 2", "'d2'"});
  }
  SUBCASE("empty") {
    write_bytes(path, "date,close,volume\nd1,1.5,10\nd2,,11\n");
    check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
                {path, "line 3 has an empty close cell", "'d2,,11'"});
  }
}

TEST_CASE("rejects a row with more cells than the header names, such as a decimal comma") {
  const TempDir dir;
  const std::string path = dir.file("comma.csv");
  write_bytes(path, "close\n1.5\n2,5\n");
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "line 3 has 2 cells", "names 1 column", "'2,5'"});
}

TEST_CASE("counts the lines inside quoted cells when naming a bad row") {
  const TempDir dir;
  const std::string path = dir.file("multiline.csv");
  write_bytes(path, "note,close\n\"two\nlines\",1.5\n\"three\nmore\nlines\",abc\n");
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "line 4", "'abc' is not a number"});
}

TEST_CASE("rejects a CSV with a header but no rows") {
  const TempDir dir;
  const std::string path = dir.file("header_only.csv");
  SUBCASE("LF") { write_bytes(path, "date,close\n"); }
  SUBCASE("CRLF and blank lines") { write_bytes(path, "close\r\n\r\n\r\n"); }
  SUBCASE("no newline") { write_bytes(path, "close"); }
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "header but no data rows"});
}

TEST_CASE("rejects a blank line between CSV rows, naming both lines") {
  const TempDir dir;
  const std::string path = dir.file("gap.csv");
  write_bytes(path, "close\n1.5\n\n2.5\n");
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "line 3 is blank", "line 4"});
}

TEST_CASE("rejects a CSV with a quoted cell that is never closed") {
  const TempDir dir;
  const std::string path = dir.file("quote.csv");
  write_bytes(path, "date,close\n\"2024-01-02,1.5\n2024-01-03,2.5\n");
  check_error(ipcfloor::load_series(path), ErrorCode::bad_data,
              {path, "line 2", "never closed"});
}

TEST_CASE("save_series replaces an existing file whole and leaves no temporary file behind") {
  const TempDir dir;
  const std::string path = dir.file("s.npy");
  REQUIRE(ipcfloor::save_series(path, sample_series(500)).has_value());
  const auto replacement = sample_series(20);
  REQUIRE(ipcfloor::save_series(path, replacement).has_value());
  const auto loaded = ipcfloor::load_series(path);
  REQUIRE(loaded.has_value());
  check_bitwise_equal(*loaded, replacement);
  const auto entries = std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator());
  CHECK(entries == 1);
}

TEST_CASE("save_series names the path and why it cannot write: a missing directory") {
  const TempDir dir;
  const std::string path = dir.file("no/such/dir/s.csv");
  check_error(ipcfloor::save_series(path, std::vector<double>{1.0, 2.0}), ErrorCode::io,
              {path, dir.file("no/such/dir") + " does not exist"});
}

TEST_CASE("numpy reads a .npy written by save_series bit for bit") {
  if (!numpy_available()) {
    MESSAGE("skipped: /usr/bin/python3 with numpy is not available");
    return;
  }
  const TempDir dir;
  auto series = sample_series(1000);
  const auto edges = awkward_series();
  std::copy(edges.begin(), edges.end(), series.begin());
  REQUIRE(ipcfloor::save_series(dir.file("ours.npy"), series).has_value());
  REQUIRE(ipcfloor::save_series(dir.file("ours.f64"), series).has_value());
  REQUIRE(ipcfloor::save_series(dir.file("ours.csv"), series).has_value());
  CHECK(run_python(dir, R"(
import sys
import numpy as np
d = sys.argv[1]
with open(d + '/ours.npy', 'rb') as f:
    assert np.lib.format.read_magic(f) == (1, 0)
a = np.load(d + '/ours.npy')
raw = np.fromfile(d + '/ours.f64', dtype='<f8')
csv = np.loadtxt(d + '/ours.csv', dtype='<f8', skiprows=1)
assert a.dtype == np.dtype('<f8'), a.dtype
assert a.shape == (1000,), a.shape
assert a.flags.c_contiguous
assert np.array_equal(a.view('<u8'), raw.view('<u8'))
assert np.array_equal(a.view('<u8'), csv.view('<u8'))
)"));
}

TEST_CASE("loads .npy files numpy wrote, and rejects numpy's arrays that are not 1-D '<f8'") {
  if (!numpy_available()) {
    MESSAGE("skipped: /usr/bin/python3 with numpy is not available");
    return;
  }
  const TempDir dir;
  REQUIRE(run_python(dir, R"(
import sys
import numpy as np
d = sys.argv[1]
a = np.arange(1, 1001, dtype='<f8') * 0.1 + 50.0
a.tofile(d + '/ref.f64')
np.save(d + '/v1.npy', a)
for major in (2, 3):
    with open(d + '/v%d.npy' % major, 'wb') as f:
        np.lib.format.write_array(f, a, version=(major, 0))
np.savetxt(d + '/numpy.csv', a, header='close', comments='')
np.save(d + '/be.npy', a.astype('>f8'))
np.save(d + '/f4.npy', a.astype('<f4'))
np.save(d + '/i8.npy', np.arange(1, 1001, dtype='<i8'))
np.save(d + '/column.npy', a.reshape(-1, 1))
)"));
  std::vector<double> expected(1000);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    expected[i] = static_cast<double>(i + 1) * 0.1 + 50.0;
  }
  const auto reference = ipcfloor::load_series(dir.file("ref.f64"));
  REQUIRE(reference.has_value());
  check_bitwise_equal(*reference, expected);
  for (const char* name : {"v1.npy", "v2.npy", "v3.npy", "numpy.csv"}) {
    INFO(name);
    const auto loaded = ipcfloor::load_series(dir.file(name));
    REQUIRE(loaded.has_value());
    check_bitwise_equal(*loaded, expected);
  }
  check_error(ipcfloor::load_series(dir.file("be.npy")), ErrorCode::bad_data,
              {"be.npy", "'>f8'", "big-endian"});
  check_error(ipcfloor::load_series(dir.file("f4.npy")), ErrorCode::bad_data,
              {"f4.npy", "'<f4'", "float32"});
  check_error(ipcfloor::load_series(dir.file("i8.npy")), ErrorCode::bad_data,
              {"i8.npy", "'<i8'", "int64"});
  check_error(ipcfloor::load_series(dir.file("column.npy")), ErrorCode::bad_data,
              {"column.npy", "(1000, 1)", "2-D"});
}

TEST_CASE("loads 150,000 bars from every format in a few milliseconds") {
  const TempDir dir;
  const auto series = sample_series(150'000);
  for (const char* name : {"big.f64", "big.npy", "big.csv"}) {
    const std::string path = dir.file(name);
    REQUIRE(ipcfloor::save_series(path, series).has_value());
    double best_ms = std::numeric_limits<double>::infinity();
    for (int run = 0; run < 5; ++run) {
      const auto start = std::chrono::steady_clock::now();
      const auto loaded = ipcfloor::load_series(path);
      const auto stop = std::chrono::steady_clock::now();
      REQUIRE(loaded.has_value());
      REQUIRE(loaded->size() == series.size());
      best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(stop - start).count());
    }
    MESSAGE(fmt::format("load_series({}): 150,000 bars in {:.3f} ms (best of 5)", name, best_ms));
    // Generous so sanitizer and loaded CI builds pass; catches an accidental quadratic pass.
    CHECK(best_ms < 250.0);
  }
}

// ---- Only regular files and standard input, and never past a bound ---------------------------

namespace {

// What a reader said about one input, from a child process: its error code and message, or "ok".
// The child runs under a 1 GiB address-space limit (not under ASan, which cannot start under one)
// and the parent waits at most `limit`, so a reader that would wait forever or read until memory
// runs out fails this test instead of hanging it or taking the host.
struct ChildVerdict {
  bool finished = false;  // false: still waiting after `limit`, or killed by a signal
  std::string text;
};

template <class Read>
ChildVerdict verdict_in_child(Read read, std::chrono::seconds limit = std::chrono::seconds(20)) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
#if !defined(__SANITIZE_ADDRESS__)  // ASan reserves terabytes of shadow: it cannot start under the limit
    const rlimit one_gib{rlim_t{1} << 30, rlim_t{1} << 30};
    ::setrlimit(RLIMIT_AS, &one_gib);
#endif
    // Nothing may escape the child: doctest would go on running the other cases in it.
    try {
      const std::string text = read();
      (void)!::write(pipe_fds[1], text.data(), text.size());
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  ChildVerdict verdict;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ::close(pipe_fds[0]);
      return verdict;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  char buffer[4096];
  for (ssize_t got; (got = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) verdict.text.append(buffer, got);
  ::close(pipe_fds[0]);
  verdict.finished = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return verdict;
}

template <class T>
std::string describe(const Expected<T>& result) {
  if (result) return "ok";
  return fmt::format("{}|{}", static_cast<int>(result.error().code), result.error().message);
}

std::string invalid_argument_text() { return fmt::format("{}|", static_cast<int>(ErrorCode::invalid_argument)); }

}  // namespace

TEST_CASE("load_series and load_combos refuse a FIFO at once, naming it, without waiting for a writer") {
  const TempDir dir;
  const std::string fifo = dir.file("prices.csv");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const bool combos : {false, true}) {
    CAPTURE(combos);
    const auto start = std::chrono::steady_clock::now();
    const ChildVerdict verdict = verdict_in_child(
        [&] { return combos ? describe(ipcfloor::load_combos(fifo)) : describe(ipcfloor::load_series(fifo)); },
        std::chrono::seconds(5));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
    REQUIRE_MESSAGE(verdict.finished, "the reader waited for a writer");
    CHECK(verdict.text.rfind(invalid_argument_text(), 0) == 0);
    CHECK_MESSAGE(verdict.text.find("FIFO") != std::string::npos, verdict.text);
    CHECK(verdict.text.find(fifo) != std::string::npos);
  }
}

TEST_CASE("load_series and load_combos refuse /dev/zero and /dev/urandom as character devices, reading nothing") {
  for (const std::string device : {"/dev/zero", "/dev/urandom"}) {
    for (const bool combos : {false, true}) {
      CAPTURE(device);
      CAPTURE(combos);
      const ChildVerdict verdict = verdict_in_child(
          [&] { return combos ? describe(ipcfloor::load_combos(device)) : describe(ipcfloor::load_series(device)); });
      REQUIRE_MESSAGE(verdict.finished, "the reader did not come back (read until memory ran out?)");
      CHECK(verdict.text.rfind(invalid_argument_text(), 0) == 0);
      CHECK_MESSAGE(verdict.text.find("character device") != std::string::npos, verdict.text);
    }
  }
}

// The densest legal combo file: rows of `row` up to just under the 32 MiB bound, and one bad row last.
std::string dense_combo_text(std::string_view header, std::string_view row, std::string_view bad_row) {
  std::string text(header);
  const std::size_t rows = (ipcfloor::kMaxComboFileBytes - 100 - header.size() - bad_row.size()) / row.size();
  text.reserve(header.size() + rows * row.size() + bad_row.size());
  for (std::size_t i = 0; i < rows; ++i) text += row;
  text += bad_row;
  return text;
}

TEST_CASE("a legal combo file just under the 32 MiB bound parses into a few times its size, never dozens") {
  const TempDir dir;
  const std::string path = dir.file("dense.csv");
  // 2.8 million rows of 12 bytes; the bad row's text and error come back from the kept text.
  const std::string text = dense_combo_text("h,L,s,p3,p2,p\n", "3,6,2,1,2,3\n", "x,6,2,1,2,3\n");
  const std::size_t rows = std::count(text.begin(), text.end(), '\n') - 1;
  write_bytes(path, text);
  const ChildVerdict grown = verdict_in_child([&] {
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    const auto parsed = ipcfloor::load_combos(path);
    rusage after{};
    ::getrusage(RUSAGE_SELF, &after);
    if (!parsed) return "E " + parsed.error().message;
    const ipcfloor::ComboLine bad = (*parsed)[parsed->size() - 1];
    return fmt::format("{} {} {} {} {}", parsed->size(), (after.ru_maxrss - before.ru_maxrss) * 1024,
                       (*parsed)[0].combo.L, bad.raw, bad.error);
  });
  REQUIRE_MESSAGE(grown.finished, "the child was killed (out of memory under its 1 GiB address space?)");
  std::size_t parsed_rows = 0;
  std::uint64_t grew = 0;
  std::int64_t first_l = 0;
  char raw[32] = {};
  REQUIRE_MESSAGE(std::sscanf(grown.text.c_str(), "%zu %lu %ld %31s", &parsed_rows, &grew, &first_l, raw) == 4,
                  grown.text);
  CHECK(parsed_rows == rows);
  CHECK(first_l == 6);
  CHECK(std::string(raw) == "x,6,2,1,2,3");
  CHECK_MESSAGE(grown.text.find(fmt::format("line {}: h 'x' is not a whole number", rows + 1)) != std::string::npos,
                grown.text);
  // The text and 54 bytes a row (six parameters): about 5 times the file. Before: 19 times (and 35 in a sweep).
  CHECK_MESSAGE(grew < 8 * text.size(),
                fmt::format("parsing grew the peak RSS by {} bytes for a {}-byte file", grew, text.size()));
}

TEST_CASE("a bad row of another strategy's combo file names that strategy's column, read again from the kept text") {
  // The names live in the caller's storage, which may be gone when the row is asked for.
  std::string fast = "fast";
  std::string slow = "slow";
  ipcfloor::ComboColumns columns;
  columns.names = {fast, slow};
  columns.count = 2;
  auto rows = ipcfloor::parse_combos("slow,fast\n40,10\n\nx,10\n", "pair.csv", columns);
  fast.assign(32, '#');
  slow.assign(32, '#');
  REQUIRE_MESSAGE(rows.has_value(), rows.error().message);
  REQUIRE(rows->size() == 2);
  CHECK(rows->parsed(0));
  CHECK((*rows)[0].combo.as_array() == std::array<std::int64_t, 6>{10, 40, 0, 0, 0, 0});
  CHECK_FALSE(rows->parsed(1));
  CHECK(rows->line(1) == 4);
  CHECK((*rows)[1].error == "line 4: slow 'x' is not a whole number");
  CHECK((*rows)[1].raw == "x,10");
  columns.names = {"fast", "slow"};
  auto json = ipcfloor::parse_combos("{\"fast\":10,\"slow\":40}\n{\"fast\":10}\n", "pair.jsonl", columns);
  REQUIRE(json.has_value());
  CHECK(json->parsed(0));
  CHECK((*json)[1].error.find("\"slow\" is missing") != std::string::npos);
}

TEST_CASE("a combo file whose rows the host cannot back is refused before they are allocated, naming them") {
  const std::string text = "h,L,s,p3,p2,p\n3,6,2,1,2,3\n3,6,2,1,2,3\n";
  // What a caller would keep per row, past any host's memory.
  const auto refused = ipcfloor::parse_combos(text, "combos.csv", ipcfloor::columns_of(ipcfloor::builtin()),
                                              std::size_t{1} << 50);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ipcfloor::ErrorCode::resource);
  CHECK_MESSAGE(refused.error().message.find("combos.csv: its 3 rows take up to") != std::string::npos,
                refused.error().message);
  CHECK_MESSAGE(refused.error().message.find("available") != std::string::npos, refused.error().message);
  const auto parsed = ipcfloor::parse_combos(text, "combos.csv");
  REQUIRE(parsed.has_value());
  CHECK(parsed->size() == 2);
}

TEST_CASE("a combo file of short rows of a one-parameter strategy parses into under 10 times its size") {
  const TempDir dir;
  const std::string path = dir.file("steps.csv");
  // 4 million rows of two bytes ("7\n"), the shortest a row can be. Before: 57 bytes a row besides
  // the text, about 30 times the file.
  std::string text = "step\n";
  constexpr std::size_t kRows = 4'000'000;
  text.reserve(text.size() + 2 * kRows);
  for (std::size_t i = 0; i < kRows; ++i) text += "7\n";
  write_bytes(path, text);
  ipcfloor::ComboColumns columns;
  columns.names = {"step"};
  columns.count = 1;
  const ChildVerdict grown = verdict_in_child([&] {
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    const auto parsed = ipcfloor::load_combos(path, columns, 1);  // and a sweep's verdict byte a row
    rusage after{};
    ::getrusage(RUSAGE_SELF, &after);
    if (!parsed) return "E " + parsed.error().message;
    return fmt::format("{} {} {} {}", parsed->size(), (after.ru_maxrss - before.ru_maxrss) * 1024,
                       parsed->combo(kRows - 1).h, parsed->line(kRows - 1));
  });
  REQUIRE_MESSAGE(grown.finished, "the child was killed");
  std::size_t rows = 0, line = 0;
  std::uint64_t grew = 0;
  std::int64_t step = 0;
  REQUIRE_MESSAGE(std::sscanf(grown.text.c_str(), "%zu %lu %ld %zu", &rows, &grew, &step, &line) == 4, grown.text);
  CHECK(rows == kRows);
  CHECK(step == 7);
  CHECK(line == kRows + 1);
  MESSAGE("parsing " << text.size() << " bytes of two-byte rows grew the peak RSS by " << grew << " bytes ("
                     << static_cast<double>(grew) / static_cast<double>(text.size()) << " times the file)");
  CHECK(grew < 10 * text.size());
}

TEST_CASE("blank lines take no room: a file of blank lines is counted by its rows, not its lines") {
  // A header, a million blank lines and one row. Before: each line counted as a row (57 bytes),
  // some 40 times the memory the two rows take.
  std::string text = "h,L,s,p3,p2,p\n";
  text.append(1'000'000, '\n');
  text += "  \t\r\n3,6,2,1,2,3\n";
  const auto refused = ipcfloor::parse_combos(text, "blank.csv", ipcfloor::columns_of(ipcfloor::builtin()),
                                              std::size_t{1} << 50);
  REQUIRE_FALSE(refused.has_value());
  CHECK_MESSAGE(refused.error().message.find("blank.csv: its 2 rows take up to") != std::string::npos,
                refused.error().message);
  const auto parsed = ipcfloor::parse_combos(text, "blank.csv");
  REQUIRE(parsed.has_value());
  REQUIRE(parsed->size() == 1);
  CHECK(parsed->line(0) == 1'000'003);
  CHECK(parsed->combo(0).L == 6);
}

TEST_CASE("a series or combo file over its bound is refused from its size, before anything is allocated") {
  const TempDir dir;
  // Sparse: the size is there, the disk blocks are not.
  const std::string series = dir.file("huge.f64");
  const std::string combos = dir.file("huge.csv");
  write_bytes(series, "");
  fs::resize_file(series, ipcfloor::kMaxSeriesFileBytes + 8);
  write_bytes(combos, "");
  fs::resize_file(combos, ipcfloor::kMaxComboFileBytes + 1);
  const ChildVerdict too_long = verdict_in_child([&] { return describe(ipcfloor::load_series(series)); });
  REQUIRE(too_long.finished);
  CHECK(too_long.text.rfind(invalid_argument_text(), 0) == 0);
  CHECK_MESSAGE(too_long.text.find("more than") != std::string::npos, too_long.text);
  const ChildVerdict too_many = verdict_in_child([&] { return describe(ipcfloor::load_combos(combos)); });
  REQUIRE(too_many.finished);
  CHECK(too_many.text.rfind(invalid_argument_text(), 0) == 0);
  CHECK_MESSAGE(too_many.text.find("32.0 MiB") != std::string::npos, too_many.text);
}
