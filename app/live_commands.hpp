#pragma once
// The two sides of live mode on the command line: `ipcfloor feed` appends closes to a live
// engine's series, `ipcfloor signals` subscribes combos and prints their per-bar signals. Both
// stop on SIGINT or SIGTERM, print what they did, and exit 128 + the signal's number (130 for
// Ctrl-C), as a shell reports a command it interrupted. With --reconnect both outlive a restart
// of the engine (clients/reconnect.hpp): `feed` goes on from the bar after the engine's last,
// `signals` renews its subscriptions and prints the snapshot, flagged as a restart.

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace ipcfloor {

struct FeedOptions {
  std::string name = "ipcfloor";
  std::string data;     // --data FILE: .csv, .npy or .f64; empty: stdin, a CSV read line by line
  std::string column;   // --column NAME: a CSV's column of closes (default: close, or a headerless column)
  // --from N: append the file from its bar N. Unset: after the bars the engine already holds,
  // when the file starts with exactly those; a file that does not is refused.
  std::optional<std::size_t> from;
  std::optional<std::size_t> count;  // --count N: append at most N bars
  double rate = 0.0;    // --rate HZ: pace the bars (replay); 0: as fast as the engine takes them
  // --pace-to-subscribers: every APPEND is paced (kAppendPaced): a bar waits until each
  // subscription's signal fits its subscriber's ring, so a replay loses no signal.
  bool pace_to_subscribers = false;
  bool quiet = false;
  std::string socket_dir;
  bool reconnect = false;           // --reconnect: re-attach when the engine goes away, and go on
  double reconnect_limit_s = 30.0;  // --reconnect-limit-s S: how long one outage may last
};

struct SignalsOptions {
  std::string name = "ipcfloor";
  std::string strategy;  // --strategy NAME: one the engine serves (empty: the built-in one)
  std::string lengths;   // --lengths 6,8: combo_from_length of each
  std::string combos;    // --combos FILE: CSV whose header names the strategy's parameters, or JSON lines
  bool json = false;     // one JSON object per line
  bool crossings_only = false;
  std::optional<std::uint64_t> count;  // stop after this many signals
  double idle_exit_s = 0.0;            // stop after this long without a signal (0: never)
  std::string socket_dir;
  bool reconnect = false;           // --reconnect: re-attach when the engine goes away, and go on
  double reconnect_limit_s = 30.0;  // --reconnect-limit-s S: how long one outage may last
};

CLI::App* add_feed_subcommand(CLI::App& app, FeedOptions& options);
CLI::App* add_signals_subcommand(CLI::App& app, SignalsOptions& options);
[[nodiscard]] int run_feed_command(const FeedOptions& options);
[[nodiscard]] int run_signals_command(const SignalsOptions& options);

}  // namespace ipcfloor
