#include "engine/journal_writer.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include <fmt/format.h>

#include "common/affinity.hpp"
#include "shm/doorbell.hpp"

namespace ipcfloor {
namespace {

// An idle writer wakes at least this often to look at its stop flag and its sync deadline.
constexpr std::chrono::milliseconds kIdleBound{50};

std::uint64_t realtime_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(now.tv_nsec);
}

// The outcome a failed write's errno stands for: a full disk (or quota, or file size limit), which
// frees up, or anything else.
JournalOutcome outcome_of(int err) noexcept {
  return err == ENOSPC || err == EDQUOT || err == EFBIG ? JournalOutcome::full : JournalOutcome::failed;
}

}  // namespace

JournalWriter::JournalWriter(BarJournal journal, const JournalWriterConfig& config, DataHeader& header)
    : journal_(std::move(journal)),
      config_(config),
      header_(header),
      slots_(std::make_unique<Slot[]>(kCapacity)),
      batch_(kBatch),
      next_index_(journal_.next_bar()),
      bytes_(journal_.bytes()),
      bar_records_(journal_.next_bar() - journal_.contents().base.bars),
      last_sync_(WaitClock::now()) {}

Expected<std::unique_ptr<JournalWriter>> JournalWriter::start(BarJournal journal, const JournalWriterConfig& config,
                                                              DataHeader& header) {
  std::unique_ptr<JournalWriter> writer(new JournalWriter(std::move(journal), config, header));
  writer->report();
  try {
    writer->thread_ = std::thread([w = writer.get()] { w->run(); });
  } catch (const std::system_error& error) {
    return fail(ErrorCode::io, "cannot start the journal's writer thread: {}", error.what());
  }
  return writer;
}

JournalWriter::~JournalWriter() { stop(); }

void JournalWriter::submit(std::uint64_t index, double close, std::uint64_t tick) noexcept {
  Slot& slot = slots_[submitted_ % kCapacity];
  slot.index = index;
  slot.close = close;
  slot.tick = tick;
  slot.outcome = JournalOutcome::pending;
  ++submitted_;
  // release: publishes the slot; pairs with the acquire load of published_ in run().
  published_.store(submitted_, std::memory_order_release);
  if (config_.wait == WaitMode::block) detail::notify_channel({word_, sleeping_});
}

bool JournalWriter::take_finished(JournalOutcome& outcome) noexcept {
  // acquire: pairs with the writer's release store of completed_ in write_batch(), after it
  // stored each slot's outcome.
  if (retired_ == completed_.load(std::memory_order_acquire)) return false;
  outcome = slots_[retired_ % kCapacity].outcome;
  ++retired_;
  return true;
}

void JournalWriter::stop() noexcept {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);  // release: pairs with the acquire load in run()
  detail::notify_channel({word_, sleeping_});
  thread_.join();
}

void JournalWriter::report() noexcept {
  // relaxed: figures for people (status); nothing is published through them.
  header_.journal_records.store(bar_records_, std::memory_order_relaxed);
  header_.journal_bytes.store(bytes_, std::memory_order_relaxed);
  header_.journal_refused.store(refused_, std::memory_order_relaxed);
  header_.journal_state.store(static_cast<std::uint32_t>(state_), std::memory_order_relaxed);
}

bool JournalWriter::sync_now() noexcept {
  if (::fdatasync(journal_.fd()) != 0) {
    // After a failed fdatasync the kernel may have dropped the dirty pages: what the file holds
    // on disk is unknown, so no later record may be called durable.
    broken_ = true;
    state_ = JournalState::failed;
    return false;
  }
  unsynced_ = false;
  last_sync_ = WaitClock::now();
  // relaxed: for people, as in report().
  header_.journal_last_fsync_unix_ns.store(realtime_ns(), std::memory_order_relaxed);
  return true;
}

bool JournalWriter::cut_back() noexcept {
  if (::ftruncate(journal_.fd(), static_cast<off_t>(bytes_)) == 0) return true;
  broken_ = true;
  state_ = JournalState::failed;
  return false;
}

void JournalWriter::write_batch(std::uint64_t done, std::uint32_t count) noexcept {
  // The records that continue the journal: those whose index is its next bar, in order. The rest
  // were submitted before the serving thread heard of an earlier failure: refused with it.
  std::uint32_t taken = 0;
  while (!broken_ && taken < count && slots_[(done + taken) % kCapacity].index == next_index_ + taken) {
    const Slot& slot = slots_[(done + taken) % kCapacity];
    batch_[taken] = bar_record(slot.index, slot.close, slot.tick);
    ++taken;
  }
  JournalOutcome outcome = JournalOutcome::durable;
  if (taken != 0) {
    const int err = write_fully(journal_.fd(), std::as_bytes(std::span(batch_.data(), taken)));
    if (err != 0) {
      outcome = cut_back() ? outcome_of(err) : JournalOutcome::failed;
      if (!broken_) state_ = outcome == JournalOutcome::full ? JournalState::full : JournalState::failed;
    } else if (config_.sync.policy == FsyncPolicy::every && !sync_now()) {
      outcome = JournalOutcome::failed;
      (void)cut_back();  // what it holds is unknown anyway: it stays failed
    } else {
      unsynced_ = config_.sync.policy != FsyncPolicy::every;
      next_index_ += taken;
      bytes_ += std::uint64_t{taken} * kJournalRecordBytes;
      bar_records_ += taken;
      if (state_ == JournalState::full) state_ = JournalState::ok;  // the disk has room again
    }
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    Slot& slot = slots_[(done + i) % kCapacity];
    if (i < taken) {
      slot.outcome = outcome;
    } else {
      slot.outcome = broken_ ? JournalOutcome::failed
                             : (state_ == JournalState::full ? JournalOutcome::full : JournalOutcome::failed);
    }
    if (slot.outcome != JournalOutcome::durable) ++refused_;
  }
  report();
  // release: publishes every outcome above; pairs with the acquire load in take_finished().
  completed_.store(done + count, std::memory_order_release);
  if (config_.wait == WaitMode::block && config_.engine_word != nullptr) wake_serving_thread(*config_.engine_word);
}

void JournalWriter::idle_until(std::uint64_t done, WaitDeadline deadline) noexcept {
  auto ready = [this, done]() noexcept {
    // acquire: pairs with the release stores of published_ (submit) and stop_ (stop).
    return published_.load(std::memory_order_acquire) != done || stop_.load(std::memory_order_acquire);
  };
  if (config_.wait == WaitMode::block) {
    (void)detail::block_until(ready, {word_, sleeping_}, deadline);
  } else {
    (void)detail::backoff_until(ready, deadline);
  }
}

void JournalWriter::run() noexcept {
  pthread_setname_np(pthread_self(), "ipcf-journal");
  if (!config_.cpus.empty()) (void)restrict_current_thread(config_.cpus);  // best effort: off the serving cpu
  std::uint64_t done = 0;
  for (;;) {
    // acquire: pairs with the release store in submit(): the slots up to it are written.
    const std::uint64_t published = published_.load(std::memory_order_acquire);
    if (published != done) {
      const auto count = static_cast<std::uint32_t>(std::min<std::uint64_t>(published - done, kBatch));
      write_batch(done, count);
      done += count;
      continue;
    }
    const bool interval = config_.sync.policy == FsyncPolicy::interval;
    if (interval && unsynced_ && WaitClock::now() - last_sync_ >= config_.sync.interval) {
      (void)sync_now();
      report();
    }
    // acquire: pairs with the release store in stop(); every submit came before it.
    if (stop_.load(std::memory_order_acquire) && published_.load(std::memory_order_acquire) == done) break;
    WaitDeadline deadline = WaitClock::now() + kIdleBound;
    if (interval && unsynced_) deadline = std::min(deadline, last_sync_ + config_.sync.interval);
    idle_until(done, deadline);
  }
  // What was written reaches the disk before the engine is gone, whatever the policy.
  if (unsynced_ && !broken_) (void)sync_now();
  report();
}

}  // namespace ipcfloor
