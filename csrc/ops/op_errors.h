// How fp8ext's ops describe arguments and report a bad one, in header-only torch types (no libtorch), so that the
// validation code serves the libtorch C++ API and the stable ABI alike.
//
// A failed check throws std::runtime_error whose text is exactly the message: it reaches Python as RuntimeError
// with that text under both APIs (the stable ABI's STD_TORCH_CHECK would prefix the function and file:line).
// docs/errors.md lists the messages.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include <torch/headeronly/core/DeviceType.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/HeaderOnlyArrayRef.h>

namespace fp8ext {

using ScalarType = torch::headeronly::ScalarType;
using IntSpan = torch::headeronly::HeaderOnlyArrayRef<int64_t>;

// The arguments written one after another, as operator<< writes each: the one formatter of messages and warnings.
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw std::runtime_error(str(args...));
}

#define FP8EXT_CHECK(cond, ...)                       \
  do {                                                \
    if (!(cond)) ::fp8ext::fail(__VA_ARGS__);         \
  } while (false)

// The names users know from Python ("torch.bfloat16", "[2, 32, 64]", "cuda:0").
std::string dtype_name(ScalarType t);
std::string shape_str(IntSpan sizes);

// A tensor's device as validation reads it: its type and index (-1: none, as for "cpu").
struct DeviceMeta {
  torch::headeronly::DeviceType type = torch::headeronly::DeviceType::CPU;
  int index = -1;
  bool operator==(const DeviceMeta& o) const { return type == o.type && index == o.index; }
  bool operator!=(const DeviceMeta& o) const { return !(*this == o); }
};
std::string device_str(DeviceMeta d);

}  // namespace fp8ext
