#pragma once
// What differs by LibTorch version for the files compiled without LibTorch's other headers
// (runtime/): only <torch/version.h>. Part of compat/: every difference between LibTorch versions
// lives in this folder (torch_compat.hpp has the rest).

#include <torch/version.h>

namespace hpctrain::compat {

/// Whether CPU convolutions may go through oneDNN (MKL-DNN) by default. LibTorch 2.x's oneDNN
/// convolution backward (seen with Debian 13's 2.6 on x86-64) now and then writes non-finite
/// weight gradients: PyTorch alone, a 1 -> 8 channel 3x3 convolution as a network's first layer,
/// 7 of 3,300 backward passes with oneDNN and 0 of 2,700 without (docs/PLATFORMS.md); a
/// training run stops at the first one. LibTorch 1.13's passed 1,200 of 1,200. Where this is
/// false, hpctrain turns oneDNN off for the CPU (LibTorch's own convolution kernels);
/// HPCTRAIN_CPU_ONEDNN=1 turns it back on. Local.
constexpr bool kCpuOneDnnByDefault = TORCH_VERSION_MAJOR < 2;

}  // namespace hpctrain::compat
