#pragma once
// The ring answers each lane has started but not published, kept in the order of their requests:
// a lane's ring answers go out in request order, so an answer computed early (a cheap request
// behind a heavy one at a worker) waits here until the ones before it are done. One window per
// lane, as long as the lane's ring (capped at kMaxAnswerWindow), indexed by request position.
//
// Threads: serving thread only. The constructor allocates (setup); the rest is noexcept and
// allocation-free.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "shm/frames.hpp"

namespace ipcfloor {

// Ring answers a lane may have started but not published, at most: a ring of capacity C never
// has more than C in flight; this caps the memory per lane.
inline constexpr std::uint32_t kMaxAnswerWindow = 1024;

class AnswerWindow {
 public:
  // `ring_capacity` is a power of two, so the window is one as well.
  AnswerWindow(std::uint32_t lanes, std::uint32_t ring_capacity)
      : size_(std::min(ring_capacity, kMaxAnswerWindow)),
        answers_(std::size_t{lanes} * size_),
        records_(answers_.size()),
        ready_(answers_.size()),
        with_record_(answers_.size()) {}

  [[nodiscard]] std::uint32_t size() const noexcept { return size_; }
  // Where the answer to lane `lane`'s request at ring position `position` is written.
  [[nodiscard]] ResponseSlot& at(std::uint32_t lane, std::uint64_t position) noexcept { return answers_[index(lane, position)]; }
  // Its answer record (STATS, TRADES, a strategy's refusal), when with_record says it has one.
  [[nodiscard]] AnswerRecord& record_at(std::uint32_t lane, std::uint64_t position) noexcept {
    return records_[index(lane, position)];
  }
  [[nodiscard]] bool with_record(std::uint32_t lane, std::uint64_t position) const noexcept {
    return with_record_[index(lane, position)] != 0;
  }
  void set_with_record(std::uint32_t lane, std::uint64_t position, bool with) noexcept {
    with_record_[index(lane, position)] = with ? 1 : 0;
  }
  // Whether that answer is complete.
  [[nodiscard]] bool ready(std::uint32_t lane, std::uint64_t position) const noexcept {
    return ready_[index(lane, position)] != 0;
  }
  void set_ready(std::uint32_t lane, std::uint64_t position, bool ready) noexcept {
    ready_[index(lane, position)] = ready ? 1 : 0;
  }

 private:
  [[nodiscard]] std::size_t index(std::uint32_t lane, std::uint64_t position) const noexcept {
    return std::size_t{lane} * size_ + (position & (size_ - 1));
  }

  std::uint32_t size_;
  std::vector<ResponseSlot> answers_;
  std::vector<AnswerRecord> records_;
  std::vector<std::uint8_t> ready_;
  std::vector<std::uint8_t> with_record_;
};

}  // namespace ipcfloor
