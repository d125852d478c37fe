// Convolutions by cuDNN (cudnn_conv.cu), which conv.cu hands Conv2D, FusedConv2D and both gradients to when
// the run asks for it (TCTL_CUDA_CUDNN=1, or =log to name each shape's algorithm, until the GPU check has
// compared cuDNN's results and speed with tensorctl's own kernels) and cuDNN can take the shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/kernel_context.h"
#include "core/ops/window.h"

namespace tctl::cuda {

// The scratch one convolution may take: conv.cu's im2col patches, chunk by chunk, or cuDNN's workspace.
inline constexpr std::size_t kConvScratchBytes = std::size_t{256} << 20;

// Which product of a convolution: y = conv(x, k); dx from dy and k; dk from x and dy.
enum class ConvPass { kForward, kInputGrad, kKernelGrad };

// Runs one pass with cuDNN on NHWC float32 tensors and a [kh, kw, C, F] kernel, and returns true; or returns
// false, having queued nothing, where cuDNN does not take it (not asked for, not loaded, padding it cannot
// express, more elements than its int dimensions hold, no deterministic algorithm within the workspace
// limit, or a refusal to run it), and the caller runs its own kernels; where cuDNN does not take a shape it
// was asked for, one line on stderr says why, once. Forward: a = x, b = k, y = conv(x, k) [N, Ho, Wo, F];
// kInputGrad: a = dy, b = k, y = dx; kKernelGrad: a = x, b = dy, y = dk [kh, kw, C, F].
// Under a reduced compute type (a mixed precision policy) the operands are converted to it, cuDNN sums in
// float32, and its result is stored in that type before widening to float32 (cuDNN's legacy API has no
// float32 result for reduced operands; PyTorch's autocast keeps the same). Float32: FMA math, no TF32,
// unless the run allows TF32. Throws RuntimeError naming the node when cuDNN fails a call it took.
bool cudnn_conv(KernelContext& ctx, ConvPass pass, const WindowGeometry& g, std::int64_t filters, const float* a,
                const float* b, float* y);

// Whether cuDNN's symmetric padding and int dimensions express the convolution: its output size, padded by
// pad_before on both sides, must be tensorctl's (an odd "same" padding whose extra row is read is not), and
// every tensor must fit its int dimensions.
bool cudnn_expresses(const WindowGeometry& g, std::int64_t filters);

// For `tensorctl devices`: "9.19.0, used for convolutions with TCTL_CUDA_CUDNN=1", "9.19.0, in use for
// convolutions", or why it is absent.
std::string cudnn_status();

}  // namespace tctl::cuda
