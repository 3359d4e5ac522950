#pragma once
// moodycamel::ReaderWriterQueue, with its ThreadSanitizer annotations switched on under GCC.
// Include this instead of <readerwriterqueue/readerwriterqueue.h>.
//
// Why: the queue orders its slots with standalone fences, which TSan does not model, so TSan
// reports races on every handed-over element unless the queue annotates its fences. The queue
// does annotate them, but only where `__has_feature(thread_sanitizer)` exists (clang); GCC 12
// has no __has_feature and signals TSan with __SANITIZE_THREAD__ instead. This defines the same
// two annotations the queue would (happens-before at each release fence, happens-after at each
// acquire fence, on one shared anchor) before the queue's header sees its defaults. No effect
// outside a TSan build.

#if defined(__SANITIZE_THREAD__) && !defined(AE_TSAN_ANNOTATE_RELEASE)
namespace ipcfloor::detail {
inline int rw_queue_tsan_anchor;  // the address both annotations name; never read or written
}  // namespace ipcfloor::detail
extern "C" void AnnotateHappensBefore(const char* file, int line, void* address);
extern "C" void AnnotateHappensAfter(const char* file, int line, void* address);
#define AE_TSAN_ANNOTATE_RELEASE() \
  AnnotateHappensBefore(__FILE__, __LINE__, static_cast<void*>(&::ipcfloor::detail::rw_queue_tsan_anchor))
#define AE_TSAN_ANNOTATE_ACQUIRE() \
  AnnotateHappensAfter(__FILE__, __LINE__, static_cast<void*>(&::ipcfloor::detail::rw_queue_tsan_anchor))
#endif

#include <readerwriterqueue/readerwriterqueue.h>
