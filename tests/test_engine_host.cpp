// The engine host (host/engine_host.hpp) in this process: what `ipcfloor serve` runs, without
// its command line. It starts the servers, keeps them in its loop until it is asked to stop or a
// stop signal comes, and stops them cleanly.

#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench/engine_child.hpp"
#include "clients/shm_client.hpp"
#include "common/combo.hpp"
#include "data/gbm.hpp"
#include "host/engine_host.hpp"
#include "kernel/kernel.hpp"

using namespace ipcfloor;

namespace {

std::vector<double> small_series() {
  GbmParams gbm;
  gbm.bars = 2000;
  return generate_gbm(gbm).value();
}

// A segment of 2 lanes in backoff mode (no core spun), on the last allowed cpu.
EngineHostConfig shm_config(const std::string& name, const std::vector<double>& close) {
  EngineHostConfig config;
  config.take_stop_signals = false;
  ShmEngineConfig shm;
  shm.segment.name = name;
  shm.segment.lanes = 2;
  shm.segment.series = close;
  shm.segment.hugepages = HugePagesMode::off;
  shm.segment.mlock = MlockMode::off;
  shm.segment.fee = 0.09;
  shm.wait = WaitMode::backoff;
  shm.cpu = ::sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 1 : 0;
  config.shm = std::move(shm);
  return config;
}

ShmClientOptions backoff_client() {
  ShmClientOptions options;
  options.wait = WaitMode::backoff;
  options.timeout = std::chrono::seconds(10);
  return options;
}

}  // namespace

TEST_CASE("an engine host serves a client until request_stop, stops the engine, and its end removes the socket") {
  const std::string name = unique_segment_name("host");
  const auto close = small_series();
  auto host = EngineHost::start(shm_config(name, close));
  REQUIRE_MESSAGE(host.has_value(), host.error().message);
  const std::string socket = (*host)->shm()->segment().socket_path();
  CHECK(std::filesystem::exists(socket));

  std::vector<EngineEvent::Kind> events;
  const EngineEventSink sink = [&events](const EngineEvent& event) { events.push_back(event.kind); };
  BacktestResult answered{};
  std::thread client([&] {
    auto attached = ShmClient::connect(name, backoff_client());
    REQUIRE_MESSAGE(attached.has_value(), attached.error().message);
    RequestSlot request{};
    request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
    request.params = combo_from_length(6);
    ResponseSlot response{};
    REQUIRE(attached->call(request, response) == CallStatus::ok);
    answered = {response.pnl, response.trades};
    attached = std::unexpected(Error{});  // hands the lane back
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*host)->request_stop();
  });
  const int ended = (*host)->run(sink);
  client.join();
  CHECK(ended == 0);
  (*host)->stop(sink);
  (*host)->stop(sink);  // idempotent
  KernelWorkspace workspace(hma_workspace_bytes(close.size()));
  BacktestResult expected{};
  REQUIRE(run_backtest(close, combo_from_length(6), 0.09, workspace, expected) == KernelStatus::ok);
  CHECK(answered == expected);
  CHECK(std::count(events.begin(), events.end(), EngineEvent::Kind::lane_claimed) == 1);
  CHECK(std::count(events.begin(), events.end(), EngineEvent::Kind::lane_released) == 1);
  host->reset();  // the engine's socket and lock file go with it
  CHECK_FALSE(std::filesystem::exists(socket));
}

TEST_CASE("SIGTERM ends an engine host's keeper loop with the signal's number, and no thread of it dies of it") {
  const auto close = small_series();
  EngineHostConfig config = shm_config(unique_segment_name("host-signal"), close);
  config.take_stop_signals = true;
  auto host = EngineHost::start(std::move(config));
  REQUIRE_MESSAGE(host.has_value(), host.error().message);
  // The serving thread inherited the mask: the signal waits for the keeper's signalfd.
  REQUIRE(::kill(::getpid(), SIGTERM) == 0);
  CHECK((*host)->run({}) == SIGTERM);
  (*host)->stop();
}

TEST_CASE("an engine host asked for nothing is refused, and one whose engine cannot start leaves no socket behind") {
  EngineHostConfig nothing;
  nothing.take_stop_signals = false;
  auto refused = EngineHost::start(nothing);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::invalid_argument);

  const auto close = small_series();
  EngineHostConfig config = shm_config("no/such name", close);  // the segment refuses the name
  SocketServerOptions sockets;
  sockets.unix_path = "/tmp/" + unique_segment_name("host") + ".sock";
  config.sockets = sockets;
  auto failed = EngineHost::start(std::move(config));
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().code == ErrorCode::invalid_argument);
  CHECK_FALSE(std::filesystem::exists(sockets.unix_path));
}
