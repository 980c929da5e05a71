#pragma once
// The LibTorch side of Precision (runtime/precision.hpp, which the pure plan library includes
// without LibTorch): the dtype autocast computes in.

#include <c10/core/ScalarType.h>

#include "hpctrain/runtime/precision.hpp"

namespace hpctrain {

/// The autocast dtype of `precision` (at::kFloat: no autocast). Local.
inline at::ScalarType autocast_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return at::kBFloat16;
    case Precision::kFp16: return at::kHalf;
    case Precision::kFp32: break;
  }
  return at::kFloat;
}

}  // namespace hpctrain
