#pragma once
// The engine's per-lane histogram of service time (from a request's detection to its answer),
// in log-linear buckets: four per power of two from 64 ns up, like HdrHistogram with two
// significant bits. The serving thread adds to it with relaxed stores; `ipcfloor status` reads
// it from the read-only data object. Bucket 0 holds everything under 64 ns, which is where an
// ECHO answered in place lands without reading the clock; the last bucket holds everything from
// its lower bound up.
//
// Pure arithmetic, constexpr, shared by the writer and every reader.

#include <bit>
#include <cstddef>
#include <cstdint>

namespace ipcfloor {

inline constexpr std::size_t kServiceBuckets = 112;
inline constexpr std::uint64_t kServiceFirstBoundNs = 64;

// The bucket that holds `ns`.
[[nodiscard]] constexpr std::size_t service_bucket(std::uint64_t ns) noexcept {
  if (ns < kServiceFirstBoundNs) return 0;
  const int exponent = 63 - std::countl_zero(ns);  // >= 6
  const auto sub = static_cast<std::size_t>((ns >> (exponent - 2)) & 3U);
  const std::size_t bucket = 1 + static_cast<std::size_t>(exponent - 6) * 4 + sub;
  return bucket < kServiceBuckets ? bucket : kServiceBuckets - 1;
}

// The smallest ns bucket `bucket` holds.
[[nodiscard]] constexpr std::uint64_t service_bucket_lower_ns(std::size_t bucket) noexcept {
  if (bucket == 0) return 0;
  const std::size_t exponent = 6 + (bucket - 1) / 4;
  const std::uint64_t sub = (bucket - 1) % 4;
  return (4 + sub) << (exponent - 2);
}

// One past the largest ns bucket `bucket` holds (the last bucket is open-ended: its bound is
// where it starts plus one step, for display).
[[nodiscard]] constexpr std::uint64_t service_bucket_upper_ns(std::size_t bucket) noexcept {
  if (bucket == 0) return kServiceFirstBoundNs;
  const std::size_t exponent = 6 + (bucket - 1) / 4;
  return service_bucket_lower_ns(bucket) + (std::uint64_t{1} << (exponent - 2));
}

static_assert(service_bucket(63) == 0 && service_bucket(64) == 1, "bucket 0 ends at 64 ns");
static_assert(service_bucket_lower_ns(service_bucket(1000)) <= 1000 && 1000 < service_bucket_upper_ns(service_bucket(1000)),
              "a value lies inside the bounds of its bucket");
static_assert(service_bucket_upper_ns(5) == service_bucket_lower_ns(6), "buckets tile the axis");

}  // namespace ipcfloor
