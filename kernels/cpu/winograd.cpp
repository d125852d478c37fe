// Winograd F(4x4, 3x3) on the CPU (see winograd.h). Output pixels are cut into 4x4 tiles, counted over
// the batch in order (image, tile row, tile column); each tile reads the 6x6 square of input around it,
// zero outside the input. A block of tiles is transformed into [tiles][36][channels] (or [36][tiles]
// [channels] for large blocks of the kernel gradient: see Layout), multiplied by the transformed kernel
// [36][channels][filters] point by point with sgemm, and taken back. The transforms work on vectors of
// channels or filters, kLanes at a time.
#include "kernels/cpu/winograd.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

#include "core/ceil_div.h"
#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

constexpr std::int64_t kPoints = 36;  // points of the 6x6 transformed domain
constexpr std::int64_t kSide = 6;
constexpr std::int64_t kTile = 4;                             // output pixels per tile side
constexpr std::int64_t kMultiple = 16;                        // channels and filters come in multiples of this
constexpr std::int64_t kBlockFloats = std::int64_t{1} << 17;  // transformed floats of a block's widest side
constexpr std::int64_t kMinBlockTiles = 16;
// The kernel gradient's partials: at most 8, and at most 64 MB of them (each is 36 x channels x filters
// floats: a 512-512 convolution gets one).
constexpr std::int64_t kKernelGradParts = 8;
constexpr std::int64_t kPartialFloats = std::int64_t{1} << 24;
// Below this many products in the transformed domain (tiles x 36 x channels x filters, a quarter of
// im2col's multiply-adds) a convolution's blocks or parts run on one thread: see `split` below.
constexpr std::int64_t kSplitWork = std::int64_t{1} << 22;

// Per-thread buffers (kernel_util.h). The calling thread's kernel transforms and partials are read (and
// the partials written) by its helpers while it waits for them.
enum class Buffer { kKernel, kFlipped, kInput, kProducts, kPartials, kCount };
float* buffer(std::int64_t floats, Buffer which) { return thread_scratch(floats, which); }

// The four one-dimensional transforms, on 6 (or 3, or 4) values read `s` apart and written `rs` apart,
// for T a float or a vector of them. B^T takes an input row of 6 to the domain, G a kernel row of 3,
// A^T the domain's 6 back to 4 outputs; A and G^T are the adjoints the kernel gradient runs backwards.
template <class T>
inline void input_row(const T* d, std::int64_t s, T* r, std::int64_t rs) {
  const T d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
  r[0] = 4.0f * d0 - 5.0f * d2 + d4;
  r[rs] = d3 + d4 - 4.0f * (d1 + d2);
  r[2 * rs] = 4.0f * (d1 - d2) + d4 - d3;
  r[3 * rs] = 2.0f * (d3 - d1) + d4 - d2;
  r[4 * rs] = 2.0f * (d1 - d3) + d4 - d2;
  r[5 * rs] = 4.0f * d1 - 5.0f * d3 + d5;
}
template <class T>
inline void kernel_row(const T* g, std::int64_t s, T* r, std::int64_t rs) {
  const T g0 = g[0], g1 = g[s], g2 = g[2 * s];
  r[0] = 0.25f * g0;
  r[rs] = (-1.0f / 6) * (g0 + g1 + g2);
  r[2 * rs] = (-1.0f / 6) * (g0 - g1 + g2);
  r[3 * rs] = (1.0f / 24) * g0 + (1.0f / 12) * g1 + (1.0f / 6) * g2;
  r[4 * rs] = (1.0f / 24) * g0 - (1.0f / 12) * g1 + (1.0f / 6) * g2;
  r[5 * rs] = g2;
}
template <class T>
inline void output_row(const T* m, std::int64_t s, T* r, std::int64_t rs) {
  const T a = m[s] + m[2 * s], b = m[s] - m[2 * s], c = m[3 * s] + m[4 * s], d = m[3 * s] - m[4 * s];
  r[0] = m[0] + a + c;
  r[rs] = b + 2.0f * d;
  r[2 * rs] = a + 4.0f * c;
  r[3 * rs] = b + 8.0f * d + m[5 * s];
}
template <class T>
inline void output_row_adjoint(const T* o, std::int64_t s, T* m, std::int64_t ms) {
  const T o0 = o[0], o1 = o[s], o2 = o[2 * s], o3 = o[3 * s];
  m[0] = o0;
  m[ms] = o0 + o1 + o2 + o3;
  m[2 * ms] = o0 - o1 + o2 - o3;
  m[3 * ms] = o0 + 2.0f * o1 + 4.0f * o2 + 8.0f * o3;
  m[4 * ms] = o0 - 2.0f * o1 + 4.0f * o2 - 8.0f * o3;
  m[5 * ms] = o3;
}
template <class T>
inline void kernel_row_adjoint(const T* u, std::int64_t s, T* g, std::int64_t gs) {
  const T u0 = u[0], u1 = u[s], u2 = u[2 * s], u3 = u[3 * s], u4 = u[4 * s], u5 = u[5 * s];
  g[0] = 0.25f * u0 - (1.0f / 6) * (u1 + u2) + (1.0f / 24) * (u3 + u4);
  g[gs] = (1.0f / 6) * (u2 - u1) + (1.0f / 12) * (u3 - u4);
  g[2 * gs] = (1.0f / 6) * (u3 + u4 - u1 - u2) + u5;
}

// One stride-1 3x3 correlation: in [batch, in_h, in_w, in_c] (zero outside), out [batch, out_h, out_w,
// out_c], output pixel (y, x) reading input rows y - pad_top .. y - pad_top + 2, and the blocks of tiles.
struct Plan {
  std::int64_t batch, in_h, in_w, in_c, out_h, out_w, out_c, pad_top, pad_left;
  std::int64_t tiles_h = 0, tiles_w = 0, tiles = 0, blocks = 1, block_tiles = 0;

  Plan(std::int64_t batch, std::int64_t in_h, std::int64_t in_w, std::int64_t in_c, std::int64_t out_h,
       std::int64_t out_w, std::int64_t out_c, std::int64_t pad_top, std::int64_t pad_left)
      : batch(batch),
        in_h(in_h),
        in_w(in_w),
        in_c(in_c),
        out_h(out_h),
        out_w(out_w),
        out_c(out_c),
        pad_top(pad_top),
        pad_left(pad_left) {
    tiles_h = ceil_div(out_h, kTile);
    tiles_w = ceil_div(out_w, kTile);
    tiles = batch * tiles_h * tiles_w;
    // Blocks by shape alone, an even number of them where there are several, so two threads share evenly;
    // at least two where each gets kMinBlockTiles tiles (a small layer in one block runs on one thread).
    blocks = std::max<std::int64_t>(1, tiles * kPoints * std::max(in_c, out_c) / kBlockFloats);
    if (blocks == 1 && tiles >= 2 * kMinBlockTiles) blocks = 2;
    if (blocks > 1) blocks += blocks % 2;
    blocks = std::min(blocks, std::max<std::int64_t>(tiles, 1));
    block_tiles = ceil_div(tiles, blocks);
  }
  // Tile t's image and the output pixel of its top-left corner.
  void locate(std::int64_t t, std::int64_t& n, std::int64_t& y, std::int64_t& x) const {
    const std::int64_t per_image = tiles_h * tiles_w, r = t % per_image;
    n = t / per_image;
    y = r / tiles_w * kTile;
    x = r % tiles_w * kTile;
  }
  // The tiles of block b: [first, first + count).
  std::int64_t first(std::int64_t b) const { return b * block_tiles; }
  std::int64_t count(std::int64_t b) const {
    return std::max<std::int64_t>(0, std::min(block_tiles, tiles - first(b)));
  }
};

// Where point e of tile t of a block lies in a transformed block of `width` floats per point:
// tile-major [tiles][36][width] (a tile's 36 points together: its transform writes a few lines, and each
// point's sgemm reads rows 36 x width apart), or point-major [36][tiles][width] (each point's rows together).
// Tile-major is faster for small blocks (the digits CNN's second convolution, 32 tiles a block); point-major
// for the 32x32x3 CNN's kernel gradients (57 to 114 tiles a block), where the transposed sgemm reads rows
// far apart. Measured by `tensorctl profile configs/digits_cnn.json --ops` and bench/conv_gemm.sh (figures
// in bench/README.md).
struct Layout {
  std::int64_t tile, point;  // strides in floats
  static Layout tile_major(std::int64_t width) { return {kPoints * width, width}; }
  static Layout point_major(std::int64_t tiles, std::int64_t width) { return {width, tiles * width}; }
  std::int64_t at(std::int64_t t, std::int64_t e) const { return t * tile + e * point; }
};

// The kernel [3, 3, in_c, out_c] taken to the domain: u [36][in_c][out_c].
void transform_kernel(const float* k, std::int64_t in_c, std::int64_t out_c, float* u) {
  for (std::int64_t c = 0; c < in_c; ++c) {
    for (std::int64_t f = 0; f < out_c; f += kLanes) {
      Floats g[9], t[18], v[kPoints];
      for (int tap = 0; tap < 9; ++tap) g[tap] = load(k + (tap * in_c + c) * out_c + f);
      for (int j = 0; j < 3; ++j) kernel_row(g + j, 3, t + j, 3);  // t [6][3]: the kernel's columns
      for (int i = 0; i < kSide; ++i) kernel_row(t + i * 3, 1, v + i * kSide, 1);
      for (int e = 0; e < kPoints; ++e) store(u + (e * in_c + c) * out_c + f, v[e]);
    }
  }
}

// The input tiles [first, first + count) of `in` taken to the domain, into v laid out as `layout` says.
void transform_input(const Plan& p, const float* in, std::int64_t first, std::int64_t count, const Layout& layout,
                     float* v) {
  const Floats zero{};
  for (std::int64_t t = 0; t < count; ++t) {
    std::int64_t n, y, x;
    p.locate(first + t, n, y, x);
    const float* rows[kSide];
    bool inside[kSide];
    for (int i = 0; i < kSide; ++i) {
      const std::int64_t iy = y - p.pad_top + i;
      rows[i] = iy >= 0 && iy < p.in_h ? in + (n * p.in_h + iy) * p.in_w * p.in_c : nullptr;
      const std::int64_t ix = x - p.pad_left + i;
      inside[i] = ix >= 0 && ix < p.in_w;
    }
    const std::int64_t x0 = x - p.pad_left;
    float* out = v + layout.at(t, 0);
    for (std::int64_t c = 0; c < p.in_c; c += kLanes) {
      // Column by column (a column wholly outside the input transforms to zeros), then row by row, each
      // row's six values stored as they come: few vectors live at once.
      Floats r[kPoints];
      for (int j = 0; j < kSide; ++j) {
        Floats d[kSide];
        if (!inside[j]) {
          for (int i = 0; i < kSide; ++i) r[i * kSide + j] = zero;
          continue;
        }
        for (int i = 0; i < kSide; ++i) d[i] = rows[i] ? load(rows[i] + (x0 + j) * p.in_c + c) : zero;
        input_row(d, 1, r + j, kSide);
      }
      for (int i = 0; i < kSide; ++i) {
        Floats w[kSide];
        input_row(r + i * kSide, 1, w, 1);
        for (int j = 0; j < kSide; ++j) store(out + (i * kSide + j) * layout.point + c, w[j]);
      }
    }
  }
}

// The products m (laid out as `layout` says) of tiles [first, first + count) taken back to output pixels;
// finish(first pixel, pixels) on each row of a tile once it is written.
void transform_output(const Plan& p, const float* m, std::int64_t first, std::int64_t count, const Layout& layout,
                      float* out, FunctionRef<void(std::int64_t, std::int64_t)> finish) {
  for (std::int64_t t = 0; t < count; ++t) {
    std::int64_t n, y, x;
    p.locate(first + t, n, y, x);
    const std::int64_t rows = std::min(kTile, p.out_h - y), cols = std::min(kTile, p.out_w - x);
    for (std::int64_t f = 0; f < p.out_c; f += kLanes) {
      Floats w[kPoints], r[kTile * kSide], o[kTile * kTile];
      for (int e = 0; e < kPoints; ++e) w[e] = load(m + layout.at(t, e) + f);
      for (int j = 0; j < kSide; ++j) output_row(w + j, kSide, r + j, kSide);  // r [4][6]
      for (int i = 0; i < kTile; ++i) output_row(r + i * kSide, 1, o + i * kTile, 1);
      for (std::int64_t i = 0; i < rows; ++i)
        for (std::int64_t j = 0; j < cols; ++j)
          store(out + ((n * p.out_h + y + i) * p.out_w + x + j) * p.out_c + f, o[i * kTile + j]);
    }
    for (std::int64_t i = 0; i < rows; ++i) finish((n * p.out_h + y + i) * p.out_w + x, cols);
  }
}

// The output gradient's tiles [first, first + count) taken to the domain by the output transform's
// adjoint, into m laid out as `layout` says; pixels past the output's edge count as zero.
void transform_output_grad(const Plan& p, const float* dy, std::int64_t first, std::int64_t count, const Layout& layout,
                           float* m) {
  const Floats zero{};
  for (std::int64_t t = 0; t < count; ++t) {
    std::int64_t n, y, x;
    p.locate(first + t, n, y, x);
    const std::int64_t rows = std::min(kTile, p.out_h - y), cols = std::min(kTile, p.out_w - x);
    for (std::int64_t f = 0; f < p.out_c; f += kLanes) {
      Floats o[kTile * kTile], r[kSide * kTile], w[kPoints];
      for (std::int64_t i = 0; i < kTile; ++i)
        for (std::int64_t j = 0; j < kTile; ++j)
          o[i * kTile + j] =
              i < rows && j < cols ? load(dy + ((n * p.out_h + y + i) * p.out_w + x + j) * p.out_c + f) : zero;
      for (int j = 0; j < kTile; ++j) output_row_adjoint(o + j, kTile, r + j, kTile);  // r [6][4]
      for (int i = 0; i < kSide; ++i) output_row_adjoint(r + i * kTile, 1, w + i * kSide, 1);
      for (int e = 0; e < kPoints; ++e) store(m + layout.at(t, e) + f, w[e]);
    }
  }
}

// out = the correlation of `in` with the kernel u already in the domain ([36][in_c][out_c]).
void correlate(const KernelContext& ctx, const Plan& p, const float* in, const float* u, float* out,
               FunctionRef<void(std::int64_t, std::int64_t)> finish) {
  const Layout vl = Layout::tile_major(p.in_c), ml = Layout::tile_major(p.out_c);
  const bool split = p.tiles * kPoints * p.in_c * p.out_c >= kSplitWork;
  ctx.parallel_for(p.blocks, split ? 1 : p.blocks, [&](std::int64_t begin, std::int64_t end) {
    float* v = buffer(kPoints * p.block_tiles * p.in_c, Buffer::kInput);
    float* m = buffer(kPoints * p.block_tiles * p.out_c, Buffer::kProducts);
    for (std::int64_t b = begin; b < end; ++b) {
      const std::int64_t first = p.first(b), count = p.count(b);
      if (count == 0) continue;
      transform_input(p, in, first, count, vl, v);
      for (std::int64_t e = 0; e < kPoints; ++e)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(count), static_cast<int>(p.out_c),
                    static_cast<int>(p.in_c), 1.0f, v + vl.at(0, e), static_cast<int>(vl.tile),
                    u + e * p.in_c * p.out_c, static_cast<int>(p.out_c), 0.0f, m + ml.at(0, e),
                    static_cast<int>(ml.tile));
      transform_output(p, m, first, count, ml, out, finish);
    }
  });
}

}  // namespace

bool winograd_applies(const WindowGeometry& g, std::int64_t filters) {
  return g.h.window == 3 && g.w.window == 3 && g.h.stride == 1 && g.w.stride == 1 && g.channels > 0 &&
         g.channels % kMultiple == 0 && filters > 0 && filters % kMultiple == 0 && g.h.out >= 4 && g.w.out >= 4;
}

void winograd_forward(const KernelContext& ctx, const WindowGeometry& g, const float* x, const float* k,
                      std::int64_t filters, float* y, FunctionRef<void(std::int64_t, std::int64_t)> finish) {
  const Plan p(g.batch, g.h.in, g.w.in, g.channels, g.h.out, g.w.out, filters, g.h.pad_before, g.w.pad_before);
  float* u = buffer(kPoints * g.channels * filters, Buffer::kKernel);
  transform_kernel(k, g.channels, filters, u);
  correlate(ctx, p, x, u, y, finish);
}

void winograd_input_grad(const KernelContext& ctx, const WindowGeometry& g, const float* dy, const float* k,
                         std::int64_t filters, float* dx) {
  // dx[y, x, c] = sum over taps (i, j) and filters of dy[y + pad - i, x + pad - j, f] k[i, j, c, f]: a
  // correlation of dy, padded by 2 - pad, with the kernel k'[i, j, f, c] = k[2 - i, 2 - j, c, f].
  const std::int64_t c = g.channels;
  float* flipped = buffer(9 * c * filters, Buffer::kFlipped);
  for (std::int64_t tap = 0; tap < 9; ++tap) {
    const float* src = k + (8 - tap) * c * filters;
    float* dst = flipped + tap * filters * c;
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t f = 0; f < filters; ++f) dst[f * c + ch] = src[ch * filters + f];
  }
  float* u = buffer(kPoints * c * filters, Buffer::kKernel);
  transform_kernel(flipped, filters, c, u);
  const Plan p(g.batch, g.h.out, g.w.out, filters, g.h.in, g.w.in, c, 2 - g.h.pad_before, 2 - g.w.pad_before);
  correlate(ctx, p, dy, u, dx, [](std::int64_t, std::int64_t) {});
}

void winograd_kernel_grad(const KernelContext& ctx, const WindowGeometry& g, const float* x, const float* dy,
                          std::int64_t filters, float* dk) {
  const std::int64_t c = g.channels, size = kPoints * c * filters;
  const Plan p(g.batch, g.h.in, g.w.in, c, g.h.out, g.w.out, filters, g.h.pad_before, g.w.pad_before);
  const std::int64_t parts = std::min({p.blocks, kKernelGradParts, std::max<std::int64_t>(1, kPartialFloats / size)});
  const std::int64_t blocks_per_part = ceil_div(p.blocks, parts);
  float* partials = buffer(parts * size, Buffer::kPartials);
  const bool tile_major = p.block_tiles < 48;
  const Layout vl = tile_major ? Layout::tile_major(c) : Layout::point_major(p.block_tiles, c);
  const Layout ml = tile_major ? Layout::tile_major(filters) : Layout::point_major(p.block_tiles, filters);
  // Parts go to other threads only when the products are large: a helper's partial crosses to the caller's
  // core to be added, and dy reaches the helper from the core that computed it: the digits CNN's second
  // convolution (1.2M multiply-adds) ran slower on two threads than on one (`tensorctl profile
  // configs/digits_cnn.json --ops --intra-op-threads 1,2`). The parts, and so the bits, are the same either way.
  const bool split = p.tiles * kPoints * c * filters >= kSplitWork;
  ctx.parallel_for(parts, split ? 1 : parts, [&](std::int64_t begin, std::int64_t end) {
    float* v = buffer(kPoints * p.block_tiles * c, Buffer::kInput);
    float* m = buffer(kPoints * p.block_tiles * filters, Buffer::kProducts);
    for (std::int64_t part = begin; part < end; ++part) {
      float* target = partials + part * size;
      float beta = 0.0f;  // the part's first block writes it, the others add to it
      for (std::int64_t b = part * blocks_per_part; b < std::min(p.blocks, (part + 1) * blocks_per_part); ++b) {
        const std::int64_t first = p.first(b), count = p.count(b);
        if (count == 0) break;
        transform_input(p, x, first, count, vl, v);
        transform_output_grad(p, dy, first, count, ml, m);
        for (std::int64_t e = 0; e < kPoints; ++e)
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(c), static_cast<int>(filters),
                      static_cast<int>(count), 1.0f, v + vl.at(0, e), static_cast<int>(vl.tile), m + ml.at(0, e),
                      static_cast<int>(ml.tile), beta, target + e * c * filters, static_cast<int>(filters));
        beta = 1.0f;
      }
      if (beta == 0.0f) std::fill(target, target + size, 0.0f);  // a part past the last tile
    }
  });
  // The partials added in order, then taken back through the kernel transform: dk = G^T (sum) G. Channels
  // go to other threads only in runs worth waking one for.
  const std::int64_t grain = std::max<std::int64_t>(1, kElementwiseGrain / (parts * kPoints * filters));
  ctx.parallel_for(c, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t ch = begin; ch < end; ++ch) {
      for (std::int64_t f = 0; f < filters; f += kLanes) {
        Floats w[kPoints], r[3 * kSide], o[9];
        for (int e = 0; e < kPoints; ++e) {
          const float* at = partials + (e * c + ch) * filters + f;
          Floats s = load(at);
          for (std::int64_t part = 1; part < parts; ++part) s += load(at + part * size);
          w[e] = s;
        }
        for (int j = 0; j < kSide; ++j) kernel_row_adjoint(w + j, kSide, r + j, kSide);  // r [3][6]
        for (int i = 0; i < 3; ++i) kernel_row_adjoint(r + i * kSide, 1, o + i * 3, 1);
        for (int tap = 0; tap < 9; ++tap) store(dk + (tap * c + ch) * filters + f, o[tap]);
      }
    }
  });
}

}  // namespace tctl::cpu
