#pragma once
// Whether this test binary is built with ThreadSanitizer, for the suites that shorten their
// streams under it (its runtime makes every atomic a call). GCC says so with __SANITIZE_THREAD__,
// clang with __has_feature(thread_sanitizer); GCC 12 has no __has_feature.

#if defined(__SANITIZE_THREAD__)
#define IPCFLOOR_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define IPCFLOOR_TSAN 1
#endif
#endif

namespace ipcfloor {

#if defined(IPCFLOOR_TSAN)
inline constexpr bool kUnderTsan = true;
#else
inline constexpr bool kUnderTsan = false;
#endif

}  // namespace ipcfloor
