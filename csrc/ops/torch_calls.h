// Calls into libtorch through PyTorch's stable C shim that torch/csrc/stable has no wrapper for: an aten op by
// name through the dispatcher, with its error text kept where the running torch passes it on, and a warning.
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>

#include <dlfcn.h>

#ifdef FP8EXT_WITH_CUDA
#include <cuda_runtime_api.h>
#ifndef USE_CUDA
#define USE_CUDA  // shim.h declares its CUDA stream accessors only under it
#endif
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#endif
#include <torch/csrc/stable/library.h>

namespace fp8ext {

// A call into torch through the shim failed. torch >= 2.13 hands the exception's text to extensions;
// older torch keeps it to itself, and then the text here only names the call and message_known is false.
class AtenError : public std::runtime_error {
 public:
  AtenError(const std::string& what, bool known) : std::runtime_error(what), message_known(known) {}
  bool message_known;
};

// The text of the calling thread's last exception inside torch's shim, or nullptr where torch does not offer it
// (torch_exception_get_what_without_backtrace, new in 2.13). Looked up at run time, as torch's own headers do
// for shims newer than the target version: the binary stays loadable on the oldest torch it supports, and
// the headers of that torch (which do not declare it) build it too.
inline const char* torch_error_text() {
  using Getter = const char* (*)();
  static const Getter getter =
      reinterpret_cast<Getter>(dlsym(RTLD_DEFAULT, "torch_exception_get_what_without_backtrace"));
  return getter != nullptr ? getter() : nullptr;
}

[[noreturn]] inline void throw_shim_error(const char* call) {
  if (const char* what = torch_error_text()) throw AtenError(what, true);
  throw AtenError(std::string(call) + " failed (torch before 2.13 does not pass the error's message on to "
                                      "extensions)", false);
}

// Checks a shim call's result: on failure, throws AtenError with torch's message where it has one.
#define FP8EXT_SHIM_CHECK(call)                                                \
  do {                                                                         \
    if ((call) != AOTI_TORCH_SUCCESS) ::fp8ext::throw_shim_error(#call);       \
  } while (false)

// Calls `op.overload` on the stack's arguments (schema order, every argument given); the result replaces
// stack[0] (and stack[1], ... for several results).
template <std::size_t N>
void call_aten(const char* op, const char* overload, std::array<StableIValue, N>& stack) {
  FP8EXT_SHIM_CHECK(torch_call_dispatcher(op, overload, stack.data(), TORCH_ABI_VERSION));
}

// A warning, as TORCH_WARN gives it: a Python UserWarning when the op was called from Python.
inline void warn(const std::string& message) {
  aoti_torch_warn("fp8ext", __FILE__, static_cast<uint32_t>(__LINE__), message.c_str());
}

// A warning given once per process and call site (the `once` flag), as TORCH_WARN_ONCE.
inline void warn_once(std::once_flag& once, const std::string& message) {
  std::call_once(once, [&] { warn(message); });
}

#ifdef FP8EXT_WITH_CUDA
// The stream torch's CUDA work on `device` currently goes to (torch.cuda.current_stream), where kernels launch.
inline cudaStream_t current_cuda_stream(int device) {
  void* stream = nullptr;
  FP8EXT_SHIM_CHECK(aoti_torch_get_current_cuda_stream(device, &stream));
  return static_cast<cudaStream_t>(stream);
}
#endif

}  // namespace fp8ext
