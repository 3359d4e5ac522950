#include "clients/attached_engine.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

constexpr std::string_view kWindowNames[6] = {"h", "L", "s", "p3", "p2", "p"};

int code_for(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return IPCFLOOR_E_INVALID;
    case ErrorCode::bad_data: return IPCFLOOR_E_BAD_SEGMENT;
    case ErrorCode::io: return IPCFLOOR_E_IO;
    case ErrorCode::resource: return IPCFLOOR_E_RESOURCE;
    case ErrorCode::permission: return IPCFLOOR_E_PERMISSION;
    case ErrorCode::version_mismatch: return IPCFLOOR_E_VERSION;
    case ErrorCode::peer_gone: return IPCFLOOR_E_NO_ENGINE;
    case ErrorCode::timeout: return IPCFLOOR_E_TIMEOUT;
    case ErrorCode::busy: return IPCFLOOR_E_BUSY;
    case ErrorCode::protocol: return IPCFLOOR_E_CORRUPT;
  }
  return IPCFLOOR_E_INTERNAL;
}

int code_for(CallStatus status) noexcept {
  switch (status) {
    case CallStatus::ok: return IPCFLOOR_OK;
    case CallStatus::timeout: return IPCFLOOR_E_TIMEOUT;
    case CallStatus::engine_hung: return IPCFLOOR_E_ENGINE_HUNG;
    case CallStatus::engine_gone: return IPCFLOOR_E_ENGINE_GONE;
    case CallStatus::corrupt:
    case CallStatus::out_of_order: return IPCFLOOR_E_CORRUPT;
    case CallStatus::too_large: return IPCFLOOR_E_INVALID;
    case CallStatus::empty: break;
  }
  return IPCFLOOR_E_INTERNAL;
}

int code_for(std::uint16_t status) noexcept {
  switch (static_cast<Status>(status)) {
    case Status::ok: return IPCFLOOR_OK;
    case Status::window_out_of_range: return IPCFLOOR_E_WINDOW;
    default: return IPCFLOOR_E_REJECTED;
  }
}

RequestSlot request_for(Opcode opcode, const std::int64_t params[6]) noexcept {
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(opcode);
  static_assert(sizeof request.params == 6 * sizeof(std::int64_t), "a combo is six int64 windows");
  std::memcpy(&request.params, params, sizeof request.params);
  return request;
}

// Writes a sentence into a fixed buffer, cut to fit; formats in place, so it never allocates.
template <std::size_t N, class... Args>
void write_message_to(char (&buffer)[N], fmt::format_string<Args...> format, Args&&... args) noexcept {
  static_assert(N > 1);
  try {
    const auto end = fmt::format_to_n(buffer, N - 1, format, std::forward<Args>(args)...);
    buffer[std::min<std::size_t>(end.size, N - 1)] = '\0';
  } catch (...) {
    buffer[0] = '\0';
  }
}

}  // namespace

std::unique_ptr<AttachedEngine> AttachedEngine::attach(std::string_view name, const ipcfloor_options& options,
                                                       int& code, std::string& message) {
  ShmClientOptions client_options;
  if (options.timeout_ns < 0) {
    code = IPCFLOOR_E_INVALID;
    message = fmt::format("attach {}: timeout {} ns is negative", name, options.timeout_ns);
    return nullptr;
  }
  if (options.timeout_ns > 0) client_options.timeout = std::chrono::nanoseconds(options.timeout_ns);
  switch (options.wait) {
    case IPCFLOOR_WAIT_ENGINE: break;
    case IPCFLOOR_WAIT_SPIN: client_options.wait = WaitMode::spin; break;
    case IPCFLOOR_WAIT_BACKOFF: client_options.wait = WaitMode::backoff; break;
    case IPCFLOOR_WAIT_BLOCK: client_options.wait = WaitMode::block; break;
    default:
      code = IPCFLOOR_E_INVALID;
      message = fmt::format("attach {}: wait mode {} is not one of IPCFLOOR_WAIT_ENGINE (0), SPIN (1), BACKOFF (2), "
                            "BLOCK (3)", name, options.wait);
      return nullptr;
  }
  auto client = ShmClient::connect(name, client_options);
  if (!client) {
    code = code_for(client.error().code);
    message = client.error().message;
    return nullptr;
  }
  std::unique_ptr<AttachedEngine> engine(new AttachedEngine(std::move(*client)));
  code = IPCFLOOR_OK;
  return engine;
}

AttachedEngine::AttachedEngine(ShmClient client) : client_(std::move(client)) {
  // Copied once: the header lives in memory the engine (or any attacher) could rewrite later.
  const auto& header = client_.segment().header();
  fee_ = header.fee;
  checksum_ = header.series_checksum;
  bars_ = client_.segment().series().size();
  engine_pid_ = header.engine_pid;
  series_name_.assign(header.series_name, strnlen(header.series_name, sizeof header.series_name));
}

int AttachedEngine::wait_mode() const noexcept {
  switch (client_.wait_mode()) {
    case WaitMode::spin: return IPCFLOOR_WAIT_SPIN;
    case WaitMode::backoff: return IPCFLOOR_WAIT_BACKOFF;
    case WaitMode::block: return IPCFLOOR_WAIT_BLOCK;
  }
  return IPCFLOOR_WAIT_ENGINE;
}

int AttachedEngine::lane_failure(CallStatus status) noexcept {
  try {
    const std::string text = client_.describe(status);
    const std::size_t n = std::min(text.size(), sizeof message_ - 1);
    std::memcpy(message_, text.data(), n);
    message_[n] = '\0';
  } catch (...) {
    write_message_to(message_, "lane {} of engine {}: {}", client_.lane(), engine_name(), to_string(status));
  }
  return code_for(status);
}

int AttachedEngine::combo_refused(const std::int64_t params[6], std::uint16_t status, std::size_t index,
                                  std::size_t of) noexcept {
  const int code = code_for(status);
  char which[64] = "the combo";
  if (of > 1) write_message_to(which, "combo {} of {}", index, of);
  if (code == IPCFLOOR_E_WINDOW) {
    std::size_t k = 0;
    while (k < 5 && params[k] >= 1 && static_cast<std::uint64_t>(params[k]) <= bars_) ++k;
    write_message_to(message_,
                     "engine {} (pid {}) refused {} [{}, {}, {}, {}, {}, {}] on lane {}: window {} (position {}) is {}, "
                     "outside [1, {}] (the bars of its series)",
                     engine_name(), engine_pid_, which, params[0], params[1], params[2], params[3], params[4],
                     params[5], client_.lane(), kWindowNames[k], k, params[k], bars_);
  } else {
    write_message_to(message_, "engine {} (pid {}) refused {} [{}, {}, {}, {}, {}, {}] on lane {}: {} (status {})",
                     engine_name(), engine_pid_, which, params[0], params[1], params[2], params[3], params[4],
                     params[5], client_.lane(), to_string(static_cast<Status>(status)), status);
  }
  return code;
}

int AttachedEngine::drain() noexcept {
  while (client_.outstanding() != 0) {
    ResponseSlot stale{};
    if (const CallStatus got = client_.wait_response(stale); got != CallStatus::ok) return lane_failure(got);
  }
  return IPCFLOOR_OK;
}

int AttachedEngine::backtest(const std::int64_t params[6], double& pnl, std::int64_t& trades) noexcept {
  if (client_.outstanding() != 0)
    if (const int drained = drain(); drained != IPCFLOOR_OK) return drained;
  ResponseSlot response{};
  if (const CallStatus got = client_.call(request_for(Opcode::backtest, params), response); got != CallStatus::ok)
    return lane_failure(got);
  if (response.status != static_cast<std::uint16_t>(Status::ok)) return combo_refused(params, response.status, 0, 1);
  pnl = response.pnl;
  trades = response.trades;
  return IPCFLOOR_OK;
}

int AttachedEngine::sweep(const std::int64_t (*params)[6], std::size_t n, const SweepOutput& out) noexcept {
  constexpr double kNoAnswer = std::numeric_limits<double>::quiet_NaN();
  if (client_.outstanding() != 0) {
    if (const int drained = drain(); drained != IPCFLOOR_OK) {
      for (std::size_t i = 0; i < n; ++i) out.set(i, kNoAnswer, 0, drained);
      return drained;
    }
  }
  int refused = 0;
  std::size_t sent = 0;
  std::size_t answered = 0;
  const auto lane_failed = [&](CallStatus got) noexcept {
    const int code = lane_failure(got);
    for (std::size_t i = answered; i < n; ++i) out.set(i, kNoAnswer, 0, code);
    return code;
  };
  while (answered < n) {
    // Keep the ring full: the engine never waits for the next combo.
    while (sent < n && client_.outstanding() < client_.capacity()) {
      std::uint64_t seq = 0;
      if (const CallStatus got = client_.submit(request_for(Opcode::backtest, params[sent]), seq); got != CallStatus::ok)
        return lane_failed(got);
      ++sent;
    }
    ResponseSlot response{};
    if (const CallStatus got = client_.wait_response(response); got != CallStatus::ok) return lane_failed(got);
    const std::size_t i = answered++;
    if (response.status == static_cast<std::uint16_t>(Status::ok)) {
      out.set(i, response.pnl, response.trades, IPCFLOOR_OK);
      continue;
    }
    // Only the first refusal is put into words: formatting every one would cost a bad grid time.
    const int code = refused == 0 ? combo_refused(params[i], response.status, i, n) : code_for(response.status);
    ++refused;
    out.set(i, kNoAnswer, 0, code);
  }
  return refused;
}

int AttachedEngine::echo(const std::int64_t in[6], std::int64_t out[6]) noexcept {
  if (client_.outstanding() != 0)
    if (const int drained = drain(); drained != IPCFLOOR_OK) return drained;
  ResponseSlot response{};
  if (const CallStatus got = client_.call(request_for(Opcode::echo, in), response); got != CallStatus::ok)
    return lane_failure(got);
  if (response.status != static_cast<std::uint16_t>(Status::ok)) return combo_refused(in, response.status, 0, 1);
  const Combo echoed = response.echo();
  std::memcpy(out, &echoed, sizeof echoed);
  return IPCFLOOR_OK;
}

}  // namespace ipcfloor
