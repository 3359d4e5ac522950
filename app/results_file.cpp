#include "app/results_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "common/trade_stats.hpp"
#include "data/series_formats.hpp"

namespace ipcfloor {
namespace {

using Json = nlohmann::json;

Json provenance_object(const Provenance& p) {
  Json o = Json::object();
  o["ipcfloor"] = p.version;
  o["command"] = p.command;
  o["created"] = p.created;
  o["target"] = p.target;
  o["strategy"] = p.strategy;
  o["strategy_sha256"] = p.strategy_sha256;
  o["params"] = p.params;
  o["series"] = p.series.name;
  o["series_bars"] = p.series.bars;
  o["series_checksum"] = fmt::format("{:016x}", p.series.checksum);
  o["fee"] = p.fee;
  o["from_bar"] = p.from_bar;
  o["to_bar"] = p.to_bar;
  o["stats"] = p.stats;
  o["bars_per_year"] = p.bars_per_year;
  o["combos"] = p.combos;
  o["seed"] = p.seed;
  o["trials"] = p.trials;
  o["ranges"] = p.ranges;
  o["where"] = p.where;
  return o;
}

Expected<Provenance> provenance_from(const Json& o) {
  try {
    Provenance p;
    p.version = o.at("ipcfloor").get<std::string>();
    p.command = o.at("command").get<std::string>();
    p.created = o.at("created").get<std::string>();
    p.target = o.at("target").get<std::string>();
    p.strategy = o.at("strategy").get<std::string>();
    p.strategy_sha256 = o.at("strategy_sha256").get<std::string>();
    p.params = o.at("params").get<std::vector<std::string>>();
    p.series.name = o.at("series").get<std::string>();
    p.series.bars = o.at("series_bars").get<std::uint64_t>();
    p.series.checksum = std::stoull(o.at("series_checksum").get<std::string>(), nullptr, 16);
    p.fee = o.at("fee").get<double>();
    p.from_bar = o.at("from_bar").get<std::uint64_t>();
    p.to_bar = o.at("to_bar").get<std::uint64_t>();
    p.stats = o.at("stats").get<bool>();
    p.bars_per_year = o.at("bars_per_year").get<double>();
    p.combos = o.at("combos").get<std::string>();
    p.seed = o.at("seed").get<std::uint64_t>();
    p.trials = o.at("trials").get<std::uint64_t>();
    p.ranges = o.at("ranges").get<std::vector<std::string>>();
    p.where = o.at("where").get<std::string>();
    return p;
  } catch (const std::exception& error) {
    return fail(ErrorCode::bad_data, "its provenance is incomplete or malformed: {}", error.what());
  }
}

// A figure as JSON reads it back: null is NaN, "inf" and "-inf" the infinities.
double figure_of(const Json& value) {
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    return text == "-inf" ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  return value.get<double>();
}

double figure_of_text(const std::string& text) {
  if (text == "nan" || text.empty()) return std::numeric_limits<double>::quiet_NaN();
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  return std::stod(text);
}

void set_figure(TradeStats& stats, std::size_t k, double value) {
  switch (k) {
    case 0: stats.wins = static_cast<std::int64_t>(value); break;
    case 1: stats.win_rate = value; break;
    case 2: stats.profit_factor = value; break;
    case 3: stats.expectancy = value; break;
    case 4: stats.best_trade = value; break;
    case 5: stats.worst_trade = value; break;
    case 6: stats.avg_win = value; break;
    case 7: stats.avg_loss = value; break;
    case 8: stats.avg_trade_bars = value; break;
    case 9: stats.exposure = value; break;
    case 10: stats.max_drawdown = value; break;
    case 11: stats.max_drawdown_bars = static_cast<std::int64_t>(value); break;
    case 12: stats.sharpe = value; break;
    case 13: stats.sortino = value; break;
    case 14: stats.calmar = value; break;
    case 15: stats.bars = static_cast<std::uint64_t>(value); break;
    default: break;
  }
}

// Opens `path` for writing: created 0644, replacing a regular file, never through a link.
Expected<std::FILE*> open_output(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail(ErrorCode::io, "--out {}: cannot create it: {}{}", path, std::strerror(errno),
                errno == ELOOP ? " (it is a symbolic link; results are never written through one)" : "");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(ErrorCode::io, "--out {}: it is not a regular file", path);
  }
  std::FILE* out = ::fdopen(fd, "w");
  if (out == nullptr) {
    ::close(fd);
    return fail(ErrorCode::io, "--out {}: {}", path, std::strerror(errno));
  }
  return out;
}

// ---- .npz: a zip of stored (uncompressed) members, as numpy.savez writes ----------------------

void put16(std::string& out, std::uint32_t v) {
  out.push_back(static_cast<char>(v & 0xFF));
  out.push_back(static_cast<char>((v >> 8) & 0xFF));
}
void put32(std::string& out, std::uint32_t v) {
  put16(out, v & 0xFFFF);
  put16(out, v >> 16);
}
std::uint32_t get16(const std::string& in, std::size_t at) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(in[at])) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(in[at + 1])) << 8;
}
std::uint32_t get32(const std::string& in, std::size_t at) { return get16(in, at) | get16(in, at + 2) << 16; }

struct ZipMember {
  std::string name;
  std::string bytes;
};

Expected<std::string> zip_of(const std::vector<ZipMember>& members) {
  std::string out;
  std::string directory;
  for (const ZipMember& m : members) {
    if (m.bytes.size() > 0xFFFF'FFFEU || out.size() > 0xFFFF'FFFEU)
      return fail(ErrorCode::invalid_argument, "the results are {} bytes; a .npz of this writer holds under 4 GiB (use "
                  ".csv or .jsonl)", m.bytes.size());
    const auto crc = static_cast<std::uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(m.bytes.data()),
                                                      static_cast<uInt>(m.bytes.size())));
    const auto offset = static_cast<std::uint32_t>(out.size());
    const auto size = static_cast<std::uint32_t>(m.bytes.size());
    const auto header = [&](std::string& to, bool central) {
      put32(to, central ? 0x02014b50U : 0x04034b50U);
      if (central) put16(to, 20);  // made by
      put16(to, 20);               // needed
      put16(to, 0);                // flags
      put16(to, 0);                // stored
      put16(to, 0);                // time
      put16(to, 0x21);             // date: 1980-01-01
      put32(to, crc);
      put32(to, size);
      put32(to, size);
      put16(to, static_cast<std::uint32_t>(m.name.size()));
      put16(to, 0);  // extra
      if (central) {
        put16(to, 0);  // comment
        put16(to, 0);  // disk
        put16(to, 0);  // internal attributes
        put32(to, 0);  // external attributes
        put32(to, offset);
      }
      to += m.name;
    };
    header(out, false);
    out += m.bytes;
    header(directory, true);
  }
  const auto directory_at = static_cast<std::uint32_t>(out.size());
  out += directory;
  put32(out, 0x06054b50U);
  put16(out, 0);
  put16(out, 0);
  put16(out, static_cast<std::uint32_t>(members.size()));
  put16(out, static_cast<std::uint32_t>(members.size()));
  put32(out, static_cast<std::uint32_t>(directory.size()));
  put32(out, directory_at);
  put16(out, 0);
  return out;
}

Expected<std::vector<ZipMember>> unzip(const std::string& in, const std::string& path) {
  std::vector<ZipMember> members;
  std::size_t at = 0;
  while (at + 30 <= in.size() && get32(in, at) == 0x04034b50U) {
    const std::uint32_t method = get16(in, at + 8);
    const std::uint32_t size = get32(in, at + 18);
    const std::uint32_t name_length = get16(in, at + 26);
    const std::uint32_t extra = get16(in, at + 28);
    const std::size_t data = at + 30 + name_length + extra;
    if (method != 0 || data + size > in.size())
      return fail(ErrorCode::bad_data, "{}: a member is compressed or cut short (only stored members, as --out "
                  "writes them, are read)", path);
    members.push_back({in.substr(at + 30, name_length), in.substr(data, size)});
    at = data + size;
  }
  return members;
}

// The structured dtype of a row of rows.npy: the parameters, pnl, trades, and the figures.
std::string npz_dtype(const SweepShape& shape, bool with_series) {
  std::string fields;
  const auto add = [&fields](std::string_view name, const char* type) {
    fields += fmt::format("{}('{}', '{}')", fields.empty() ? "" : ", ", name, type);
  };
  if (with_series) add("series", "S64");
  for (std::size_t k = 0; k < shape.columns.count; ++k) add(shape.columns.names[k], "<i8");
  add("pnl", "<f8");
  add("trades", "<i8");
  if (shape.stats)
    for (std::size_t k = 0; k < kStatsFigureCount; ++k) {
      const std::string name = kStatsFigureNames[k];
      add(name, name == "wins" || name == "max_drawdown_bars" ? "<i8" : name == "bars" ? "<u8" : "<f8");
    }
  return "[" + fields + "]";
}

template <class T>
void append_value(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

Expected<std::string> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::io, "{}: cannot open it: {}", path, std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// CSV fields, with "..." quoting ("" inside for a quote).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back().push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back().push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back().push_back(c);
    }
  }
  return fields;
}

Expected<ResultsRead> read_jsonl(const std::string& text, const std::string& path) {
  ResultsRead read;
  std::istringstream lines(text);
  std::string line;
  bool first = true;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    Json row;
    try {
      row = Json::parse(line);
    } catch (const std::exception& error) {
      return fail(ErrorCode::bad_data, "{}: a line is not JSON: {}", path, error.what());
    }
    if (first) {
      first = false;
      if (!row.contains("provenance"))
        return fail(ErrorCode::bad_data, "{}: its first line holds no provenance (write it with sweep --out)", path);
      auto provenance = provenance_from(row["provenance"]);
      if (!provenance) return std::unexpected(provenance.error());
      read.provenance = std::move(*provenance);
      continue;
    }
    SweepRow out;
    const auto params = row.value("params", std::vector<std::int64_t>{});
    auto* values = reinterpret_cast<std::int64_t*>(&out.params);
    for (std::size_t k = 0; k < params.size() && k < 6; ++k) values[k] = params[k];
    out.series = row.value("series", std::string());
    out.error = row.value("error", std::string());
    if (out.error.empty()) {
      out.result.pnl = row.at("pnl").get<double>();
      out.result.trades = row.at("trades").get<std::int64_t>();
      for (std::size_t k = 0; k < kStatsFigureCount && read.provenance.stats; ++k)
        set_figure(out.stats, k, figure_of(row.at(kStatsFigureNames[k])));
    }
    read.rows.push_back(std::move(out));
  }
  if (first) return fail(ErrorCode::bad_data, "{}: it is empty", path);
  return read;
}

Expected<ResultsRead> read_csv(const std::string& text, const std::string& path) {
  std::istringstream lines(text);
  std::string line;
  Json provenance = Json::object();
  std::vector<std::string> header;
  ResultsRead read;
  bool known = false;
  while (std::getline(lines, line)) {
    if (line.rfind("# ", 0) == 0) {
      const auto colon = line.find(": ");
      if (colon == std::string::npos) continue;
      try {
        provenance[line.substr(2, colon - 2)] = Json::parse(line.substr(colon + 2));
      } catch (const std::exception& error) {
        return fail(ErrorCode::bad_data, "{}: a provenance line does not parse: {}", path, error.what());
      }
      continue;
    }
    if (!known) {
      auto parsed = provenance_from(provenance);
      if (!parsed) return std::unexpected(parsed.error());
      read.provenance = std::move(*parsed);
      header = csv_fields(line);
      known = true;
      continue;
    }
    const std::vector<std::string> fields = csv_fields(line);
    const auto field = [&](const std::string& name) -> std::string {
      for (std::size_t i = 0; i < header.size() && i < fields.size(); ++i)
        if (header[i] == name) return fields[i];
      return {};
    };
    SweepRow out;
    auto* values = reinterpret_cast<std::int64_t*>(&out.params);
    for (std::size_t k = 0; k < read.provenance.params.size() && k < 6; ++k) {
      const std::string v = field(read.provenance.params[k]);
      values[k] = v.empty() ? 0 : std::stoll(v);
    }
    out.series = field("series");
    out.error = field("error");
    if (out.error.empty()) {
      out.result.pnl = std::stod(field("pnl"));
      out.result.trades = std::stoll(field("trades"));
      for (std::size_t k = 0; k < kStatsFigureCount && read.provenance.stats; ++k)
        set_figure(out.stats, k, figure_of_text(field(kStatsFigureNames[k])));
    }
    read.rows.push_back(std::move(out));
  }
  if (!known) return fail(ErrorCode::bad_data, "{}: it holds no header (write it with sweep --out)", path);
  return read;
}

Expected<ResultsRead> read_npz(const std::string& bytes, const std::string& path) {
  auto members = unzip(bytes, path);
  if (!members) return std::unexpected(members.error());
  ResultsRead read;
  const ZipMember* rows = nullptr;
  for (const ZipMember& m : *members) {
    if (m.name == "provenance.npy") {
      // A 0-d '<U' array: UTF-32 after the .npy header (ASCII here).
      const auto newline = m.bytes.find('\n');
      std::string text;
      for (std::size_t i = newline + 1; i + 3 < m.bytes.size(); i += 4)
        if (m.bytes[i] != '\0') text.push_back(m.bytes[i]);
      try {
        auto provenance = provenance_from(Json::parse(text));
        if (!provenance) return std::unexpected(provenance.error());
        read.provenance = std::move(*provenance);
      } catch (const std::exception& error) {
        return fail(ErrorCode::bad_data, "{}: its provenance does not parse: {}", path, error.what());
      }
    } else if (m.name == "rows.npy") {
      rows = &m;
    } else if (m.name == "failed.jsonl") {
      std::istringstream lines(m.bytes);
      std::string line;
      while (std::getline(lines, line)) {
        if (line.empty()) continue;
        const Json row = Json::parse(line, nullptr, false);
        SweepRow out;
        const auto params = row.value("params", std::vector<std::int64_t>{});
        auto* values = reinterpret_cast<std::int64_t*>(&out.params);
        for (std::size_t k = 0; k < params.size() && k < 6; ++k) values[k] = params[k];
        out.error = row.value("error", std::string("failed"));
        read.rows.push_back(std::move(out));
      }
    }
  }
  if (rows == nullptr) return fail(ErrorCode::bad_data, "{}: it holds no rows.npy", path);
  const std::size_t data = rows->bytes.find('\n') + 1;
  const std::size_t params = read.provenance.params.size();
  const std::size_t per_row = 8 * (params + 2 + (read.provenance.stats ? kStatsFigureCount : 0));
  if (rows->bytes.find("'series', 'S64'") != std::string::npos)
    return fail(ErrorCode::bad_data, "{}: replaying a .npz of several series is not supported; write it as .jsonl", path);
  for (std::size_t at = data; at + per_row <= rows->bytes.size(); at += per_row) {
    SweepRow out;
    std::memcpy(&out.params, rows->bytes.data() + at, 8 * params);
    std::memcpy(&out.result.pnl, rows->bytes.data() + at + 8 * params, 8);
    std::memcpy(&out.result.trades, rows->bytes.data() + at + 8 * params + 8, 8);
    for (std::size_t k = 0; k < kStatsFigureCount && read.provenance.stats; ++k) {
      const char* field = rows->bytes.data() + at + 8 * (params + 2 + k);
      double value = 0.0;
      const std::string name = kStatsFigureNames[k];
      if (name == "wins" || name == "max_drawdown_bars") {
        std::int64_t v = 0;
        std::memcpy(&v, field, 8);
        value = static_cast<double>(v);
      } else if (name == "bars") {
        std::uint64_t v = 0;
        std::memcpy(&v, field, 8);
        value = static_cast<double>(v);
      } else {
        std::memcpy(&value, field, 8);
      }
      set_figure(out.stats, k, value);
    }
    read.rows.push_back(std::move(out));
  }
  return read;
}

}  // namespace

std::string provenance_json(const Provenance& provenance) { return provenance_object(provenance).dump(); }

Expected<ResultsFormat> results_format(const std::string& path) {
  if (path.ends_with(".csv")) return ResultsFormat::csv;
  if (path.ends_with(".jsonl") || path.ends_with(".json")) return ResultsFormat::jsonl;
  if (path.ends_with(".npz")) return ResultsFormat::npz;
  return fail(ErrorCode::invalid_argument, "{}: a results file is .csv, .jsonl or .npz (its extension says which)", path);
}

ResultsFile::ResultsFile(std::string path, ResultsFormat format, SweepShape shape, bool with_series)
    : path_(std::move(path)), format_(format), shape_(shape), with_series_(with_series) {}

ResultsFile::~ResultsFile() {
  if (out_ != nullptr) (void)std::fclose(out_);
  if (!scratch_path_.empty()) (void)::unlink(scratch_path_.c_str());
}

Expected<std::unique_ptr<ResultsFile>> ResultsFile::create(const std::string& path, SweepShape shape,
                                                           bool with_series) {
  auto format = results_format(path);
  if (!format) return std::unexpected(format.error());
  std::unique_ptr<ResultsFile> file(new ResultsFile(path, *format, shape, with_series));
  if (*format == ResultsFormat::npz) {
    // The records wait in a file of their own beside the target until the sweep ends.
    file->scratch_path_ = path + ".rows-" + std::to_string(::getpid());
    const int fd = ::open(file->scratch_path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      file->scratch_path_.clear();
      return fail(ErrorCode::io, "--out {}: cannot make its scratch file beside it: {}", path, std::strerror(errno));
    }
    file->out_ = ::fdopen(fd, "w+");
  } else {
    auto out = open_output(path);
    if (!out) return std::unexpected(out.error());
    file->out_ = *out;
    file->writer_ = std::make_unique<SweepWriter>(
        file->out_, *format == ResultsFormat::csv ? SweepFormat::csv : SweepFormat::json, with_series, shape);
  }
  return file;
}

Expected<void> ResultsFile::begin(const Provenance& provenance) {
  if (begun_) return {};
  begun_ = true;
  const Json object = provenance_object(provenance);
  provenance_json_ = object.dump();
  if (format_ == ResultsFormat::csv) {
    for (const auto& [key, value] : object.items()) fmt::print(out_, "# {}: {}\n", key, value.dump());
    writer_->header();
  } else if (format_ == ResultsFormat::jsonl) {
    fmt::print(out_, "{{\"provenance\":{}}}\n", provenance_json_);
  }
  if (std::fflush(out_) != 0) return fail(ErrorCode::io, "--out {}: {}", path_, std::strerror(errno));
  return {};
}

Expected<void> ResultsFile::npz_row(const SweepRow& row) {
  if (!row.error.empty()) {
    const auto values = row.params.as_array();
    Json failed = {{"params", std::vector<std::int64_t>(values.begin(), values.begin() + shape_.columns.count)},
                   {"error", row.error},
                   {"series", row.series}};
    failed_ += failed.dump() + "\n";
    return {};
  }
  std::string record;
  if (with_series_) {
    char name[64] = {};
    row.series.copy(name, sizeof name);
    record.append(name, sizeof name);
  }
  const auto values = row.params.as_array();
  for (std::size_t k = 0; k < shape_.columns.count; ++k) append_value(record, values[k]);
  append_value(record, row.result.pnl);
  append_value(record, row.result.trades);
  if (shape_.stats) {
    for (std::size_t k = 0; k < kStatsFigureCount; ++k) {
      const std::string name = kStatsFigureNames[k];
      const double figure = stats_figure(row.stats, k);
      if (name == "wins" || name == "max_drawdown_bars") {
        append_value(record, static_cast<std::int64_t>(figure));
      } else if (name == "bars") {
        append_value(record, row.stats.bars);
      } else {
        append_value(record, figure);
      }
    }
  }
  if (std::fwrite(record.data(), 1, record.size(), out_) != record.size())
    return fail(ErrorCode::io, "--out {}: writing its rows: {}", path_, std::strerror(errno));
  ++records_;
  return {};
}

Expected<void> ResultsFile::row(const SweepRow& row) {
  ++rows_;
  if (format_ == ResultsFormat::npz) return npz_row(row);
  writer_->row(row);  // flushed line by line
  if (std::ferror(out_) != 0) return fail(ErrorCode::io, "--out {}: writing its rows: {}", path_, std::strerror(errno));
  return {};
}

Expected<void> ResultsFile::finish() {
  if (finished_) return {};
  finished_ = true;
  if (format_ != ResultsFormat::npz) {
    const bool failed = std::fflush(out_) != 0 || ::fsync(::fileno(out_)) != 0;
    (void)std::fclose(out_);
    out_ = nullptr;
    if (failed) return fail(ErrorCode::io, "--out {}: {}", path_, std::strerror(errno));
    return {};
  }
  // The records, then the archive around them.
  std::string rows;
  series_formats::append_npy_header(rows, npz_dtype(shape_, with_series_), records_);
  const auto header_bytes = rows.size();
  std::fflush(out_);
  std::rewind(out_);
  rows.resize(header_bytes + static_cast<std::size_t>(::lseek(::fileno(out_), 0, SEEK_END)));
  if (::pread(::fileno(out_), rows.data() + header_bytes, rows.size() - header_bytes, 0) !=
      static_cast<ssize_t>(rows.size() - header_bytes))
    return fail(ErrorCode::io, "--out {}: reading back its rows: {}", path_, std::strerror(errno));
  std::string provenance;
  series_formats::append_npy_header(provenance, fmt::format("'<U{}'", provenance_json_.size()), 1);
  // A 0-d array: the header says shape (1,); numpy reads it as a one-element array.
  for (const char c : provenance_json_) {
    const char32_t wide = static_cast<unsigned char>(c);
    provenance.append(reinterpret_cast<const char*>(&wide), sizeof wide);
  }
  auto archive = zip_of({{"provenance.npy", provenance}, {"rows.npy", rows}, {"failed.jsonl", failed_}});
  if (!archive) return std::unexpected(archive.error());
  auto out = open_output(path_);
  if (!out) return std::unexpected(out.error());
  const bool written = std::fwrite(archive->data(), 1, archive->size(), *out) == archive->size() &&
                       std::fflush(*out) == 0 && ::fsync(::fileno(*out)) == 0;
  (void)std::fclose(*out);
  if (!written) return fail(ErrorCode::io, "--out {}: {}", path_, std::strerror(errno));
  return {};
}

Expected<ResultsRead> read_results(const std::string& path) {
  auto format = results_format(path);
  if (!format) return std::unexpected(format.error());
  auto bytes = read_whole(path);
  if (!bytes) return std::unexpected(bytes.error());
  try {
    switch (*format) {
      case ResultsFormat::jsonl: return read_jsonl(*bytes, path);
      case ResultsFormat::csv: return read_csv(*bytes, path);
      case ResultsFormat::npz: return read_npz(*bytes, path);
    }
  } catch (const std::exception& error) {
    return fail(ErrorCode::bad_data, "{}: a row does not parse: {}", path, error.what());
  }
  return fail(ErrorCode::bad_data, "{}: unknown format", path);
}

}  // namespace ipcfloor
