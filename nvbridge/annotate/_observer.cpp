// nvbridge's RecordFunction observer: one NVTX range per RecordFunction, named in torch's grammar.
//
// The same hook torch's own NVTX observer uses (torch/csrc/profiler/standalone/nvtx_observer.cpp),
// so it sees exactly the ops torch.profiler sees and changes nothing in dispatch. Names follow
// torch's getNvtxStr (torch/csrc/profiler/util.cpp, not exported, hence rebuilt here):
//   <name>[, seq = N][, op_id = K][, fwd_tid = T][, sizes = [[..], ..]][, dtypes = [..]][, values = [..]]
// (fwd_tid before sizes: a parser reads sizes as the bracketed text up to the next field or the end).
// dtypes and values are nvbridge's additions with record_shapes, one entry per sizes entry (tensor
// lists flattened as torch's inputSizes flattens them): each tensor's dtype (`-` for anything
// else), and, for the ops whose FLOPs need them (convolutions, attention, einsum, the bmm/addmm
// family), the other arguments as JSON (`null` for a tensor): stride, padding, output_mask,
// is_causal, the equation. Other ops carry no values: they would only lengthen every name.
// op_id is RecordFunction's process-wide handle. fwd_tid is nvbridge's addition on backward nodes:
// RecordFunction's forwardThreadId() is torch's logical thread number, mapped here to the Linux
// thread id Nsight Systems records (each thread registers its pair on its first annotated op).
// input_op_ids is not emitted (it needs every op's outputs handed to the observer and a map from
// each tensor to its producer).
//
// C entry points only (called through ctypes): no pybind11, so the build stays small.
#include <ATen/record_function.h>
#include <torch/csrc/profiler/util.h>

#include <nvtx3/nvToolsExt.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// The short dtype names nvbridge writes (nvbridge/annotate/_names.py has the same table).
const char* dtype_name(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::BFloat16: return "bf16";
    case c10::ScalarType::Half: return "f16";
    case c10::ScalarType::Float: return "f32";
    case c10::ScalarType::Double: return "f64";
    case c10::ScalarType::Long: return "i64";
    case c10::ScalarType::Int: return "i32";
    case c10::ScalarType::Short: return "i16";
    case c10::ScalarType::Char: return "i8";
    case c10::ScalarType::Byte: return "u8";
    case c10::ScalarType::Bool: return "b8";
    case c10::ScalarType::Float8_e4m3fn: return "f8e4m3";
    case c10::ScalarType::Float8_e5m2: return "f8e5m2";
    case c10::ScalarType::ComplexFloat: return "c64";
    case c10::ScalarType::ComplexDouble: return "c128";
    default: return nullptr;
  }
}

void append_dtype(std::string& out, const at::Tensor& tensor) {
  const char* known = dtype_name(tensor.scalar_type());
  if (known != nullptr) {
    out += known;
    return;
  }
  std::string other = c10::toString(tensor.scalar_type());  // Float8_e4m3fnuz -> float8_e4m3fnuz
  for (char& c : other) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  out += other;
}

// Entries in torch's inputSizes(fn, flatten_list_enabled=true) order: a tensor (defined or not)
// is one entry, a list one entry per defined tensor in it (one entry if it holds none), anything
// else one entry. `tensor` writes a tensor's entry, `other` any other value's.
template <typename Tensor, typename Other>
void for_each_entry(const at::RecordFunction& fn, std::string& out, Tensor tensor, Other other) {
  bool first = true;
  auto sep = [&]() {
    if (!first) {
      out += ", ";
    }
    first = false;
  };
  for (const c10::IValue& input : fn.inputs()) {
    if (input.isTensor()) {
      sep();
      tensor(input.toTensor());
    } else if (input.isList()) {
      bool any = false;
      for (const c10::IValue& item : input.toListRef()) {
        if (item.isTensor() && item.toTensor().defined()) {
          sep();
          tensor(item.toTensor());
          any = true;
        }
      }
      if (!any) {
        sep();
        other(input);
      }
    } else {
      sep();
      other(input);
    }
  }
}

void append_number(std::string& out, double value) {
  if (!std::isfinite(value)) {
    out += "null";  // JSON has no inf or nan
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", value);  // the shortest that reads back exactly, of two
  if (std::strtod(buf, nullptr) != value) {
    std::snprintf(buf, sizeof(buf), "%.17g", value);
  }
  out += buf;
  if (std::strpbrk(buf, ".eE") == nullptr) {
    out += ".0";  // keep a double a double when read back
  }
}

void append_string(std::string& out, const std::string& text) {
  out += '"';
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

// One non-tensor argument as JSON: numbers, booleans, strings, lists of them; null otherwise.
void append_value(std::string& out, const c10::IValue& value) {
  if (value.isBool()) {
    out += value.toBool() ? "true" : "false";
  } else if (value.isInt()) {
    out += std::to_string(value.toInt());
  } else if (value.isSymInt()) {
    auto hint = value.toSymInt().maybe_as_int();
    out += hint ? std::to_string(*hint) : "null";
  } else if (value.isDouble()) {
    append_number(out, value.toDouble());
  } else if (value.isString()) {
    append_string(out, value.toStringRef());
  } else if (value.isList()) {
    out += '[';
    bool first = true;
    for (const c10::IValue& item : value.toListRef()) {
      out += first ? "" : ", ";
      first = false;
      append_value(out, item);
    }
    out += ']';
  } else {
    out += "null";
  }
}

// Ops whose FLOPs or bytes depend on arguments the sizes do not show.
bool wants_values(const char* name) {
  if (std::strncmp(name, "aten::", 6) != 0) {
    return false;
  }
  const char* op = name + 6;
  return std::strstr(op, "conv") != nullptr || std::strstr(op, "attention") != nullptr ||
      std::strcmp(op, "einsum") == 0 || std::strstr(op, "bmm") != nullptr || std::strcmp(op, "addmm") == 0;
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
      name += ", dtypes = [";
      for_each_entry(
          fn, name, [&](const at::Tensor& t) { t.defined() ? append_dtype(name, t) : (void)(name += '-'); },
          [&](const c10::IValue&) { name += '-'; });
      name += ']';
      if (wants_values(fn.name())) {
        name += ", values = [";
        for_each_entry(
            fn, name, [&](const at::Tensor&) { name += "null"; }, [&](const c10::IValue& v) { append_value(name, v); });
        name += ']';
      }
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
