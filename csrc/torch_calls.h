// Calls into libtorch through PyTorch's stable C shim that torch/csrc/stable has no wrapper for: an aten op by
// name through the dispatcher, with its error text kept where the running torch passes it on, and a warning.
#pragma once

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/macros.h>

namespace fp8ext {

// An aten op called through the dispatcher failed. torch >= 2.13 hands the exception's text to extensions;
// older torch keeps it to itself, and then the text here only names the op and message_known is false.
class AtenError : public std::runtime_error {
 public:
  AtenError(const std::string& what, bool known) : std::runtime_error(what), message_known(known) {}
  bool message_known;
};

// Calls `op.overload` on the stack's arguments (schema order, every argument given); the result replaces
// stack[0] (and stack[1], ... for several results).
template <std::size_t N>
void call_aten(const char* op, const char* overload, std::array<StableIValue, N>& stack) {
  if (torch_call_dispatcher(op, overload, stack.data(), TORCH_ABI_VERSION) == TORCH_SUCCESS) return;
  const char* what = TORCH_DYNAMIC_VERSION_CALL_2_13_0(torch_exception_get_what_without_backtrace,
                                                       torch::stable::detail::torch_shim_bc_const_char_ptr);
  if (what != nullptr) throw AtenError(what, true);
  throw AtenError(std::string(op) + " failed (torch before 2.13 does not pass an op's error message on to "
                                    "extensions)", false);
}

// A warning, as TORCH_WARN gives it: a Python UserWarning when the op was called from Python.
inline void warn(const std::string& message) {
  aoti_torch_warn("fp8ext", __FILE__, static_cast<uint32_t>(__LINE__), message.c_str());
}

}  // namespace fp8ext
