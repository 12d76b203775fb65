// detfuse::Error: the one exception type of the library, the store and the
// references (plain C++, no CUDA header: db/ and reference/ include it).
//
// Library code never prints and never exits: it throws detfuse::Error with a
// message that names the argument (or the failing call and its file:line).
// The CLI maps it to exit code 2 (bad usage / input) or 1 (runtime failure)
// through Error::kind(); the C ABI to DETFUSE_ERR_INVALID_ARGUMENT / _RUNTIME.
// CUDA status checks that throw it live in kernels/common/cuda_check.h.
#pragma once

#include <stdexcept>
#include <string>

namespace detfuse {

class Error : public std::runtime_error {
 public:
  enum class Kind { invalid_argument, runtime };
  explicit Error(const std::string& what, Kind kind = Kind::runtime)
      : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// An Error of kind invalid_argument: bad shapes, null pointers, bad options.
inline Error invalid_argument(const std::string& what) {
  return Error(what, Error::Kind::invalid_argument);
}

}  // namespace detfuse
