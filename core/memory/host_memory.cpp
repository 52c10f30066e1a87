// HostHeapMemory: see host_memory.h.
#include "core/memory/host_memory.h"

#include <unistd.h>

#include <cstdlib>

namespace kiln::memory {

namespace {
constexpr std::size_t kHostAlignment = 512;
// Events carry no state on the host; every handle is this token.
char g_event_token;

std::size_t physical_bytes(int pages_name) {
  const long pages = sysconf(pages_name);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                               : 0;
}
}  // namespace

HostHeapMemory::HostHeapMemory(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}

std::string HostHeapMemory::name() const { return "host heap"; }

void* HostHeapMemory::reserve(std::size_t bytes) {
  KILN_CHECK(bytes > 0 && bytes % kHostAlignment == 0, "HostHeapMemory::reserve: ", bytes,
             " bytes is not a positive multiple of ", kHostAlignment);
  std::size_t used = used_.load();
  do {
    if (capacity_ != 0 && bytes > capacity_ - used) return nullptr;
  } while (!used_.compare_exchange_weak(used, used + bytes));
  void* p = std::aligned_alloc(kHostAlignment, bytes);
  if (p == nullptr) used_ -= bytes;
  return p;
}

void HostHeapMemory::release(void* ptr, std::size_t bytes) {
  std::free(ptr);
  used_ -= bytes;
}

EventHandle HostHeapMemory::create_event() { return &g_event_token; }
void HostHeapMemory::destroy_event(EventHandle) {}
void HostHeapMemory::record_event(EventHandle, Stream) {}
bool HostHeapMemory::event_completed(EventHandle) { return true; }

DeviceMemoryInfo HostHeapMemory::memory_info() {
  if (capacity_ != 0) return {capacity_ - used_.load(), capacity_};
  return {physical_bytes(_SC_AVPHYS_PAGES), physical_bytes(_SC_PHYS_PAGES)};
}

}  // namespace kiln::memory
