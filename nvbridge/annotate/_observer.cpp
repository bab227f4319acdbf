// nvbridge's RecordFunction observer: one NVTX range per RecordFunction, named in torch's grammar.
//
// The same hook torch's own NVTX observer uses (torch/csrc/profiler/standalone/nvtx_observer.cpp),
// so it sees exactly the ops torch.profiler sees and changes nothing in dispatch. Names follow
// torch's getNvtxStr (torch/csrc/profiler/util.cpp, not exported, hence rebuilt here):
//   <name>[, seq = N][, op_id = K][, fwd_tid = T][, sizes = [[..], ..]]
// (fwd_tid before sizes: a parser reads sizes as the bracketed text running to the end).
// op_id is RecordFunction's process-wide handle. fwd_tid is nvbridge's addition on backward nodes:
// RecordFunction's forwardThreadId() is torch's logical thread number, mapped here to the Linux
// thread id Nsight Systems records (each thread registers its pair on its first annotated op).
// input_op_ids is not emitted (it needs an output observer that keeps every tensor's producer).
//
// C entry points only (called through ctypes): no pybind11, so the build stays small.
#include <ATen/record_function.h>
#include <torch/csrc/profiler/util.h>

#include <nvtx3/nvToolsExt.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {

std::mutex tid_mutex;
std::unordered_map<uint64_t, int64_t> os_tid_of;  // torch logical thread id -> Linux tid

thread_local bool tid_registered = false;

void register_thread() {
  tid_registered = true;
  auto os_tid = static_cast<int64_t>(syscall(SYS_gettid));
  std::lock_guard<std::mutex> lock(tid_mutex);
  os_tid_of[at::RecordFunction::currentThreadId()] = os_tid;
}

int64_t os_tid(uint64_t logical) {
  std::lock_guard<std::mutex> lock(tid_mutex);
  auto it = os_tid_of.find(logical);
  return it == os_tid_of.end() ? -1 : it->second;
}

template <bool shapes>
std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn) {
  if (!tid_registered) {
    register_thread();
  }
  std::string name = fn.name();
  const int64_t seq = fn.seqNr();
  if (seq >= 0) {
    name += ", seq = " + std::to_string(seq);
  }
  if (fn.handle() > 0) {
    name += ", op_id = " + std::to_string(fn.handle());
  }
  if (seq >= 0 && fn.forwardThreadId() != 0) {
    const int64_t tid = os_tid(fn.forwardThreadId());
    if (tid >= 0) {
      name += ", fwd_tid = " + std::to_string(tid);
    }
  }
  if (shapes) {
    auto sizes = torch::profiler::impl::inputSizes(fn, /*flatten_list_enabled=*/true);
    if (!sizes.empty()) {
      name += ", sizes = " + torch::profiler::impl::shapesToStr(sizes);
    }
  }
  nvtxRangePushA(name.c_str());
  return nullptr;
}

void leave(const at::RecordFunction& /*fn*/, at::ObserverContext* /*ctx*/) {
  nvtxRangePop();
}

}  // namespace

extern "C" {

// Starts the observer on the calling thread (and the autograd threads it hands work to, which
// inherit torch's thread-local callbacks); returns the handle to stop it with.
uint64_t nvbridge_observer_start(int record_shapes) {
  auto callback = at::RecordFunctionCallback(record_shapes ? &enter<true> : &enter<false>, &leave)
                      .needsInputs(record_shapes != 0)
                      .needsIds(true);
  return at::addThreadLocalCallback(callback);
}

// Stops it; call on the thread that started it.
void nvbridge_observer_stop(uint64_t handle) {
  at::removeCallback(handle);
}

// Linux tid torch's logical thread number maps to (-1 unknown), for tests.
int64_t nvbridge_observer_os_tid(uint64_t logical) {
  return os_tid(logical);
}

}  // extern "C"
