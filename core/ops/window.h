// Sliding-window geometry shared by the Conv2D and pooling ops (NHWC float32): output sizes and padding for
// TF/Keras "valid" and "same", read from a node's attributes. The shape functions vet it, and every
// device's kernels read the same numbers from it.
//
// Attributes: "window" [kh, kw] (pooling; Conv2D takes it from its kernel), "strides" [sh, sw],
// "padding" "valid" or "same".
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/ceil_div.h"
#include "core/op_registry.h"
#include "core/tensor.h"

namespace tctl {

// One spatial dimension: input size, window, stride, output size and padding before the first element.
struct WindowDim {
  std::int64_t in = 0, window = 0, stride = 1, out = 0, pad_before = 0;
};

// "same": out = ceil(in / stride), the total padding split with the odd element at the end (bottom, right),
// as TF does. "valid": out = (in - window) / stride + 1, no padding. An unknown input (-1) gives an unknown
// output. Returns false when the window does not fit a "valid" input.
bool window_dim(std::int64_t in, std::int64_t window, std::int64_t stride, bool same, WindowDim& out);

// The geometry of one windowed op on an [N, H, W, C] input.
struct WindowGeometry {
  std::int64_t batch = 0, channels = 0;
  WindowDim h, w;
  std::int64_t out_pixels() const { return h.out * w.out; }
};

// Reads strides and padding from attrs and checks the window against the input in a shape function;
// fails naming the node when something does not fit. `what` names the window in messages ("kernel", "pool").
WindowGeometry infer_window(const InferContext& c, const Shape& input, std::int64_t kh, std::int64_t kw,
                            const std::string& what);
// The same for a kernel, where the shape function already vetted everything.
WindowGeometry window_geometry(const Attrs& attrs, const Shape& input, std::int64_t kh, std::int64_t kw);

// How the convolution kernels, on every device, cut their rows (output pixels, or whole images) into blocks
// whose size depends on the shapes only, never on the thread count, so each output comes from the same
// sums on any pool size and on the CPU and a GPU alike. A block holds about kConvBlockFloats floats of
// im2col patches (128 KB, within L2: large enough that sgemm's packing is paid rarely, small enough to stay
// in cache), and the blocks come in an even number of equal ones so two threads share them evenly.
inline constexpr std::int64_t kConvBlockFloats = std::int64_t{1} << 15;
struct RowBlocks {
  std::int64_t count = 1, rows = 0;  // rows per block; the last blocks may be shorter or empty
};
inline RowBlocks conv_row_blocks(std::int64_t rows, std::int64_t floats_per_row) {
  std::int64_t count = std::max<std::int64_t>(1, rows * floats_per_row / kConvBlockFloats);
  if (count > 1) count += count % 2;
  count = std::min(count, std::max<std::int64_t>(rows, 1));
  return {count, ceil_div(rows, count)};
}

}  // namespace tctl
