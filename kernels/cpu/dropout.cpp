// CPU kernels of Dropout for training graphs: zeroes each element with probability `rate` and scales the
// rest by 1 / (1 - rate) (definitions in core/ops/dropout.cpp). The mask comes from a counter-based stream
// keyed by (seed, stream, step), so the gradient op replays the same mask and no thread count changes it.
#include "core/ops/dropout.h"
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

// The mask kMaskLanes elements at a time: stream_words on 64-bit lanes as wide as the target's registers
// (GCC's vector extensions; AVX2, which has no 64-bit multiply, gets it from 32-bit ones), drawn as
// uniform_at draws them (uniform_bits, kUniformScale). A per-element loop was not vectorized (on AVX2 at all, and
// elsewhere not through a lambda holding its scalars by reference) and ran several times slower on the digits
// MLP's 2,048 elements (`tensorctl profile configs/digits_mlp.json --ops`, figures in bench/README.md).
constexpr int kMaskLanes = kLanes / 2;
using Words = std::uint64_t __attribute__((vector_size(kMaskLanes * sizeof(std::uint64_t))));
using Draws = std::int32_t __attribute__((vector_size(kMaskLanes * sizeof(std::int32_t))));
using MaskFloats = float __attribute__((vector_size(kMaskLanes * sizeof(float))));

void mask_block(const float* x, float* y, std::int64_t begin, std::int64_t end, std::uint64_t key, std::uint64_t first,
                float rate, float keep_scale) {
  // Each lane's element index times kStreamStride, advanced by addition: AVX2 has no 64-bit multiply, and
  // this saves one of the three that every element's word takes.
  Words scaled{};
  for (int j = 0; j < kMaskLanes; ++j)
    scaled[j] = (first + static_cast<std::uint64_t>(begin) + static_cast<std::uint64_t>(j)) * kStreamStride;
  const std::uint64_t advance = static_cast<std::uint64_t>(kMaskLanes) * kStreamStride;
  std::int64_t i = begin;
  for (; i + kMaskLanes <= end; i += kMaskLanes, scaled += advance) {
    const Words bits = uniform_bits_scaled(key, scaled);
    const MaskFloats u = __builtin_convertvector(__builtin_convertvector(bits, Draws), MaskFloats) * kUniformScale;
    MaskFloats v;
    std::memcpy(&v, x + i, sizeof v);
    const MaskFloats out = u < rate ? MaskFloats{} : v * keep_scale;
    std::memcpy(y + i, &out, sizeof out);
  }
  for (; i < end; ++i) y[i] = uniform_at(key, first + static_cast<std::uint64_t>(i)) < rate ? 0.0f : x[i] * keep_scale;
}

void apply_mask(KernelContext& ctx, std::int64_t stream) {
  const float rate = static_cast<float>(ctx.attrs().f("rate"));
  const float keep_scale = 1.0f / (1.0f - rate);
  const std::uint64_t key = ctx.random_key(stream);
  const std::uint64_t first = ctx.first_element(ctx.input(0));
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output().mutable_data<float>();
  ctx.parallel_for(ctx.output().num_elements(), kElementwiseGrain, [&](std::int64_t begin, std::int64_t end) {
    mask_block(x, y, begin, end, key, first, rate, keep_scale);
  });
}

void dropout_cpu(KernelContext& ctx) { apply_mask(ctx, dropout_stream(ctx.node())); }
void dropout_grad_cpu(KernelContext& ctx) { apply_mask(ctx, ctx.attrs().i("stream")); }

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"Dropout", dropout_cpu}, {"DropoutGrad", dropout_grad_cpu});

}  // namespace tctl::cpu
