// A required tensor argument given as None reaches an op's C++ as an undefined tensor, and reading its sizes then
// fails deep in torch ("strides() called on an undefined Tensor"). Every op refuses it by name first; the Python
// autograd guard and the fake implementations say the same where they run.
#pragma once

#include <torch/csrc/stable/tensor.h>

#include "ops/op_errors.h"

namespace fp8ext {

inline const torch::stable::Tensor& required(const torch::stable::Tensor& t, const char* op, const char* arg) {
  FP8EXT_CHECK(t.defined(), op, ": ", arg, ": expected a tensor, got None");
  return t;
}

}  // namespace fp8ext
