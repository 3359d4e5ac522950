#include "bench/python_suite.hpp"

#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <array>
#include <filesystem>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "bench/child_process.hpp"
#include "bench/engine_child.hpp"
#include "bench/helper_files.hpp"
#include "bench/host_info.hpp"
#include "bench/percentile.hpp"
#include "bench/transports.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"
#include "common/tsc_clock.hpp"

extern char** environ;

namespace ipcfloor {
namespace {

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs `argv` for `what`, its stdout and stderr captured; an error says what failed and why.
Expected<void> run_step(const std::vector<std::string>& argv, std::string_view what) {
  if (auto ran = run_captured(argv, Capture::stdout_and_stderr); !ran)
    return fail(ErrorCode::resource, "{} failed: {}", what, ran.error().message);
  return {};
}

// A fresh venv in `dir` seeing Debian's packages (numpy, setuptools), with the package built and
// installed into it offline, exactly as the README says. Returns the venv's python.
Expected<std::string> package_venv(const std::string& python, const std::string& project, const std::string& dir) {
  const std::string venv = dir + "/venv";
  if (auto made =
          run_step({python, "-m", "venv", "--system-site-packages", venv}, "making a venv (needs python3-venv)");
      !made)
    return std::unexpected(made.error());
  const std::string venv_python = venv + "/bin/python";
  if (auto installed = run_step({venv_python, "-m", "pip", "install", "--no-build-isolation", "--no-input",
                                 "--disable-pip-version-check", "--quiet", project},
                                "pip install of the ipcfloor package (needs python3-dev, python3-setuptools, "
                                "python3-wheel, python3-numpy)");
      !installed)
    return std::unexpected(installed.error());
  return venv_python;
}

// The C++ client's ECHO, as python_bench.py asks for it: `samples` round trips of its params on
// its engine from its cpu, each timed with the TSC, after `warmup` untimed ones. The client is
// attached at the first request and kept.
nlohmann::json time_cpp_echo(const nlohmann::json& request, std::optional<ShmClient>& client, const TscClock& clock) {
  try {
    if (!client) {
      ShmClientOptions options;
      options.wait = WaitMode::spin;
      auto connected = ShmClient::connect(request.at("engine").get<std::string>(), options);
      if (!connected) return {{"error", connected.error().message}};
      client.emplace(std::move(*connected));
    }
    const auto params = request.at("params").get<std::array<std::int64_t, 6>>();
    const auto samples = request.at("samples").get<std::size_t>();
    const auto warmup = request.at("warmup").get<std::size_t>();
    cpu_set_t before;
    CPU_ZERO(&before);
    (void)sched_getaffinity(0, sizeof before, &before);
    if (auto pinned = pin_current_thread(request.at("cpu").get<int>()); !pinned)
      return {{"error", pinned.error().message}};
    RequestSlot slot = ladder_echo_request();
    slot.params = Combo{params[0], params[1], params[2], params[3], params[4], params[5]};
    ResponseSlot response{};
    std::vector<double> ns;
    ns.reserve(samples);
    std::string error;
    for (std::size_t i = 0; i < warmup + samples && error.empty(); ++i) {
      const std::uint64_t t0 = TscClock::now();
      const CallStatus status = client->call(slot, response);
      const std::uint64_t t1 = TscClock::now();
      if (status != CallStatus::ok) error = client->describe(status);
      else if (response.echo().as_array() != params) error = "an ECHO came back altered";
      else if (i >= warmup) ns.push_back(clock.to_ns(t1 - t0));
    }
    (void)sched_setaffinity(0, sizeof before, &before);
    if (!error.empty()) return {{"error", error}};
    return {{"samples", ns}};
  } catch (const nlohmann::json::exception& bad) {
    return {{"error", fmt::format("a malformed request {}: {}", request.dump(), bad.what())}};
  }
}

// Where the script's percentiles sit in its sorted samples, by bench/percentile.hpp, so that the
// Python rows use the definition every other suite does: {"count": n, "at": [p, ...]} ->
// {"indices": [i, ...]}.
nlohmann::json percentile_indices(const nlohmann::json& request) {
  try {
    const auto count = request.at("count").get<std::size_t>();
    if (count == 0) return {{"error", "no samples"}};
    nlohmann::json indices = nlohmann::json::array();
    for (const auto& at : request.at("at")) indices.push_back(percentile_index(count, at.get<double>()));
    return {{"indices", indices}};
  } catch (const nlohmann::json::exception& bad) {
    return {{"error", fmt::format("a malformed request {}: {}", request.dump(), bad.what())}};
  }
}

// The script, with a pipe to its stdin and one from its stdout; stderr is ours.
struct Script {
  pid_t pid = -1;
  FILE* from = nullptr;  // its stdout
  FILE* to = nullptr;    // its stdin
};

Expected<Script> spawn_script(const std::vector<std::string>& argv) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0) return fail(ErrorCode::io, "pipe failed");
  if (pipe(from_child) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    return fail(ErrorCode::io, "pipe failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
  for (const int fd : {to_child[0], to_child[1], from_child[0], from_child[1]})
    posix_spawn_file_actions_addclose(&actions, fd);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  Script script;
  const int spawned = posix_spawn(&script.pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(to_child[0]);
  close(from_child[1]);
  if (spawned != 0) {
    close(to_child[1]);
    close(from_child[0]);
    return fail(ErrorCode::io, "could not start {}: {}", argv[0], std::strerror(spawned));
  }
  script.to = fdopen(to_child[1], "w");
  script.from = fdopen(from_child[0], "r");
  return script;
}

// Answers the script's requests until it sends its report or ends. Returns the report.
Expected<nlohmann::json> converse(Script& script, const std::string& command) {
  const TscClock clock = TscClock::calibrate();
  std::optional<ShmClient> client;
  std::optional<nlohmann::json> report;
  char* line = nullptr;
  std::size_t capacity = 0;
  while (!report && getline(&line, &capacity, script.from) > 0) {
    const nlohmann::json message = nlohmann::json::parse(line, nullptr, false);
    if (message.is_object() && message.contains("report")) {
      report = message["report"];
    } else if (message.is_object() && (message.contains("echo_cpp") || message.contains("percentile_index"))) {
      const nlohmann::json answer = message.contains("echo_cpp") ? time_cpp_echo(message["echo_cpp"], client, clock)
                                                                 : percentile_indices(message["percentile_index"]);
      const std::string reply = answer.dump() + "\n";
      std::fwrite(reply.data(), 1, reply.size(), script.to);
      std::fflush(script.to);
    }
  }
  std::free(line);
  std::fclose(script.to);
  std::fclose(script.from);
  int status = 0;
  (void)waitpid(script.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(ErrorCode::io, "the Python benchmark failed (exit {}; its reason is on stderr above): {}",
                WIFEXITED(status) ? WEXITSTATUS(status) : -1, command);
  if (!report || !report->contains("results"))
    return fail(ErrorCode::io, "the Python benchmark printed no report (command: {})", command);
  return *report;
}

}  // namespace

Expected<nlohmann::json> run_python_bench(const PythonBenchOptions& options) {
  auto script = helper_file("bench/python_bench.py", "the Python benchmark (python_bench.py)");
  if (!script) return std::unexpected(script.error());
  auto project = helper_file("python/pyproject.toml", "the ipcfloor Python package (its pyproject.toml)");
  if (!project) return std::unexpected(project.error());
  if (auto python = check_python(options.python); !python) return std::unexpected(python.error());

  std::string dir_template = (std::filesystem::temp_directory_path() / "ipcfloor-pybench-XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) return fail(ErrorCode::io, "cannot make a folder for the venv");
  const std::string dir = dir_template;
  struct RemoveDir {
    std::string path;
    ~RemoveDir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } cleanup{dir};

  auto venv_python = package_venv(options.python, std::filesystem::path(*project).parent_path().string(), dir);
  if (!venv_python) return std::unexpected(venv_python.error());
  std::vector<std::string> argv = {*venv_python, *script, "--ipcfloor", self_executable(), "--peer", "stdio",
                                   "--samples", std::to_string(options.samples), "--rounds",
                                   std::to_string(options.rounds), "--warmup", std::to_string(options.warmup),
                                   "--sweeps", std::to_string(options.sweeps), "--bars", std::to_string(options.bars)};
  if (options.client_cpu >= 0) argv.insert(argv.end(), {"--client-cpu", std::to_string(options.client_cpu)});
  if (options.server_cpu >= 0) argv.insert(argv.end(), {"--server-cpu", std::to_string(options.server_cpu)});
  std::string command;
  for (const std::string& arg : argv) command += (command.empty() ? "" : " ") + shell_quote(arg);

  struct sigaction ignore_pipe {}, previous{};
  ignore_pipe.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore_pipe, &previous);  // a script that died mid-request must not kill us
  auto spawned = spawn_script(argv);
  Expected<nlohmann::json> report = spawned ? converse(*spawned, command) : std::unexpected(spawned.error());
  sigaction(SIGPIPE, &previous, nullptr);
  if (!report) return report;
  (*report)["host"] = collect_host_info();
  (*report)["command"] = command;
  (*report)["package_source"] = std::filesystem::path(*project).parent_path().string();
  return report;
}

void print_python_bench(const nlohmann::json& report) {
  const auto& config = report["config"];
  fmt::print("python: one combo {} on {} bars, from Python {} ({}); RTT ns, each call timed on its own ({})\n",
             config["params"].dump(), config["bars"].get<std::size_t>(), report["python"].get<std::string>(),
             report["python_executable"].get<std::string>(), report["host"]["cpu"].get<std::string>());
  fmt::print("  {:<22} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9}\n", "path", "p50", "p90", "p99", "p99.9", "max", "samples");
  for (const auto& row : report["results"])
    fmt::print("  {:<22} {:>9.0f} {:>9.0f} {:>9.0f} {:>9.0f} {:>11.0f} {:>9}\n", row["name"].get<std::string>(),
               row["p50"].get<double>(), row["p90"].get<double>(), row["p99"].get<double>(),
               row["p99.9"].get<double>(), row["max"].get<double>(), row["samples"].get<std::int64_t>());
  const auto& ratios = report["ratios"];
  fmt::print("  Unix socket / segment at p50: backtest {:.1f}x, echo {:.1f}x\n",
             ratios["backtest uds/shm p50"].get<double>(), ratios["echo uds/shm p50"].get<double>());
  const auto& sweep = report["sweep"];
  fmt::print("  {} combos on {} bars, p50 per sweep: Python through the segment {:.2f} ms, `ipcfloor {}` (the whole "
             "process) {:.2f} ms: {:.3f}x; Python over the socket {:.2f} ms\n",
             config["combos"].get<std::size_t>(), config["sweep_bars"].get<std::size_t>(),
             sweep["shm"]["p50"].get<double>(), config["cli"].get<std::string>(), sweep["cli"]["p50"].get<double>(),
             sweep["shm/cli p50"].get<double>(), sweep["uds"]["p50"].get<double>());
  for (const auto& goal : report["goals"])
    fmt::print("  goal: {} <= {}: {:.3f}, {}\n", goal["what"].get<std::string>(), goal["target"].dump(),
               goal["measured"].get<double>(), goal["met"].get<bool>() ? "met" : "NOT met");
}

}  // namespace ipcfloor
