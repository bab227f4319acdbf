// nvbridge's allocator reporter: every allocation and free torch's allocators report becomes an NVTX
// mark in the `nvbridge` domain, `mem <device> <address> <bytes> <total_allocated> <total_reserved>`.
//
// The hook is torch.profiler's profile_memory: c10's allocators (ProfiledCPUMemoryReporter in
// c10/core/CPUAllocator.cpp, the CUDA caching allocator's malloc/free) ask
// c10::memoryProfilingEnabled() and call c10::reportMemoryUsageToProfiler(), both of which look up
// the thread's ThreadLocalDebugInfo entry of kind PROFILER_STATE. Pushing our reporter there is
// what torch.profiler does with its own state; at::ThreadLocalState carries the entry to the
// autograd engine's worker threads (and at::launch tasks), so their frees and allocations are
// reported on the thread that makes them.
//
// The reporter derives from torch's ProfilerStateBase, not only from c10's MemoryReportingInfoBase:
// torch code reads whatever sits in PROFILER_STATE as a ProfilerStateBase (profilerEnabled(),
// profilerType(), getProfilerConfig()), so a bare MemoryReportingInfoBase would be read past its
// end. Its config is Disabled with profile_memory on: torch sees no profiler running.
//
// Only one entry serves a thread: torch's Kineto callbacks cast the PROFILER_STATE entry to their
// own state type, so ours can never sit above torch.profiler's (its RecordFunction callbacks would
// read our object as theirs), and torch refuses to start while ours is there. start() therefore
// declines when the slot is taken; the Python side steps aside while torch.profiler runs inside
// an annotated block (nvbridge/annotate/_memory.py).
//
// The totals are c10's, unchanged: the CPU allocator counts the bytes it allocated while memory
// profiling was on (on any thread) and has no reserve (0); the caching allocator gives the device's
// current allocated and reserved bytes.
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace {

using torch::profiler::impl::ActiveProfilerType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;
using torch::profiler::impl::ProfilerStateBase;

std::atomic<uint64_t> events{0};

nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t handle = nvtxDomainCreateA("nvbridge");
  return handle;
}

void mark(const char* message) {
  nvtxEventAttributes_t attributes = {};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;  // never registered: every message is distinct
  attributes.message.ascii = message;
  nvtxDomainMarkEx(domain(), &attributes);
}

class Reporter final : public ProfilerStateBase {
 public:
  Reporter() : ProfilerStateBase(ProfilerConfig(ProfilerState::Disabled, false, /*profile_memory=*/true)) {}

  void reportMemoryUsage(void* ptr, int64_t bytes, size_t allocated, size_t reserved, c10::Device device) override {
    char buf[160];
    const uint64_t address = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr));
    if (device.is_cpu()) {
      std::snprintf(
          buf, sizeof(buf), "mem cpu %" PRIu64 " %" PRId64 " %" PRIu64 " %" PRIu64, address, bytes,
          static_cast<uint64_t>(allocated), static_cast<uint64_t>(reserved));
    } else {
      const std::string name = device.str();  // cuda:0, mps, xpu:1: torch's Device string
      std::snprintf(
          buf, sizeof(buf), "mem %s %" PRIu64 " %" PRId64 " %" PRIu64 " %" PRIu64, name.c_str(), address, bytes,
          static_cast<uint64_t>(allocated), static_cast<uint64_t>(reserved));
    }
    mark(buf);
    events.fetch_add(1, std::memory_order_relaxed);
  }

  bool memoryProfilingEnabled() const override {
    return true;
  }

  ActiveProfilerType profilerType() override {
    return ActiveProfilerType::NONE;
  }
};

// The reporter on top of this thread's debug info, or nullptr (another kind on top, or none).
Reporter* top_reporter() {
  try {
    return dynamic_cast<Reporter*>(c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE).get());
  } catch (const std::exception&) {
    return nullptr;  // _peek throws unless the newest entry is a PROFILER_STATE one
  }
}

}  // namespace

extern "C" {

// Starts reporting on the calling thread (and the threads torch hands its thread-local state to).
// 1: started; 0: the thread's profiler slot is taken (torch.profiler or torch's emit_nvtx runs);
// -1: torch refused.
int nvbridge_memory_start() {
  try {
    if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr) {
      return 0;
    }
    domain();  // create the domain before the first event, outside any allocation
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, std::make_shared<Reporter>());
    return 1;
  } catch (const std::exception&) {
    return -1;
  }
}

// Stops it: 1 when our reporter was the thread's newest entry and is gone, 0 when it is not there
// (never started, or something pushed above it; nothing is touched then).
int nvbridge_memory_stop() {
  if (top_reporter() == nullptr) {
    return 0;
  }
  try {
    c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    return 1;
  } catch (const std::exception&) {
    return 0;
  }
}

// 1 when allocator events of this thread reach our reporter.
int nvbridge_memory_active() {
  return dynamic_cast<Reporter*>(c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE)) != nullptr;
}

// Events reported so far in this process (the benchmark's and the tests' count).
uint64_t nvbridge_memory_events() {
  return events.load(std::memory_order_relaxed);
}

}  // extern "C"
