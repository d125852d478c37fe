// CUDA kernels of the optimizer updates, Increment, AccumulateGradient, MovingAverage, GlobalNorm and ClipByGlobalNorm
// (definitions in core/ops/optimizers.cpp), computed as the CPU kernels compute them (kernels/cpu/optimizers.cpp): the
// same formulas, rounded at every float operation as the CPU's (no FMA contraction), so the updates, Increment and
// ClipByGlobalNorm give the same bits. Each update is one kernel over all its buffers (weight and slots). Where they
// differ from the CPU:
// - The learning rate and Adam's step count are read on the device, inside the kernel (no host wait).
//   Adam's lr_t comes from the device's double pow, within 2 ulp of glibc's in double: after rounding to
//   float it is the CPU's value but in the rarest cases.
// - The numeric guard finds the first non-finite gradient element on the device; the update then writes
//   nothing, and the CPU's NonFiniteError is thrown on the host in stream order, so the run's synchronize
//   rethrows it (the CPU throws from the kernel). Snapshot variables still publish an unchanged version.
// - GlobalNorm sums in double in a fixed tree, not left to right: the same bits on every run, and within
//   1 ulp of the CPU's float result.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/errors.h"
#include "core/op_registry.h"
#include "core/variable.h"
#include "kernels/cuda/cuda_util.h"
#include "kernels/cuda/launch.h"

namespace tctl::cuda {
namespace {

// The CPU is built with -ffp-contract=off; nvcc would fuse a * b + c into one FMA, which rounds once and
// changes the last bit. These round each operation, as the CPU does.
__device__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ float divide(float a, float b) { return __fdiv_rn(a, b); }
__device__ float root(float a) { return __fsqrt_rn(a); }

// The guard's verdict: 2 * (index of the first non-finite element) + (1 if it is infinite, 0 if NaN), or
// kAllFinite. The smallest word names the first bad element, so a min over the threads finds it.
using Verdict = unsigned long long;
constexpr Verdict kAllFinite = ~Verdict{0};

// How an update kernel is launched. A small variable (a bias) is one block that checks its gradient itself
// and then updates: one launch where the guard's memset, its pass and the update were three, each with the
// stream's fixed cost of a few microseconds. A larger one gets the guard's pass first, then the update, both
// over a few blocks per multiprocessor, each block looping over its share (one block per 256 elements made
// the 4.2M-weight update of the MLP 784-2048-2048-10 form Adam's rates 16,000 times a step).
constexpr std::int64_t kOneBlockUpdate = 16 * kBlock;
constexpr int kUpdateBlocksPerMultiprocessor = 4;

unsigned update_grid(const KernelContext& ctx, std::int64_t n) {
  if (n <= kOneBlockUpdate) return 1;
  return std::min(grid_for(n),
                  static_cast<unsigned>(kUpdateBlocksPerMultiprocessor * device_of(ctx).multiprocessors()));
}

// atomicMin is exact for integers, so the verdict does not depend on the order the threads meet.
__global__ void find_non_finite(const float* g, std::int64_t n, Verdict* verdict) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (isfinite(g[i])) continue;
    atomicMin(verdict, 2 * static_cast<Verdict>(i) + (isinf(g[i]) ? 1 : 0));
    return;  // this thread's later elements come after i
  }
}

void throw_if_non_finite(Verdict v, const std::string& var, std::int64_t n) {
  if (v == kAllFinite) return;
  throw NonFiniteError("gradient of " + var + " is " + ((v & 1) != 0 ? "infinite" : "NaN") + " (element " +
                       std::to_string(v >> 1) + " of " + std::to_string(n) + ")");
}

// The numeric guard of an update (input 0, the gradient of var(0)), without a host wait. Its verdict is a
// device word: set and found by a memset and find_non_finite before the update kernel (or, for a one-block
// update, found by the update kernel itself, block_finds_all_finite); the update writes nothing unless it
// is kAllFinite; report() then queues a copy of it to the host in stream order, which throws the CPU's
// NonFiniteError there; guarded, below, runs the three in that order.
class Guard {
 public:
  explicit Guard(const KernelContext& ctx)
      : ctx_(ctx), n_(ctx.input(0).num_elements()), verdict_(Tensor::empty(DType::kI64, Shape{1}, &ctx.device())) {
    if (update_checks()) return;  // the update kernel finds it
    check(cudaMemsetAsync(word(), 0xff, sizeof(Verdict), stream_of(ctx)), ctx.device().name(), "cudaMemsetAsync");
    if (n_ == 0) return;
    find_non_finite<<<update_grid(ctx, n_), kBlock, 0, stream_of(ctx)>>>(in<float>(ctx, 0), n_, word());
    check_launch(ctx);
  }
  Verdict* word() { return static_cast<Verdict*>(verdict_.raw_mutable_data()); }
  std::int64_t size() const { return n_; }
  bool update_checks() const { return n_ > 0 && n_ <= kOneBlockUpdate; }
  // On a thread's own stream (race-check's) the report waits for the update and throws from here; an
  // update with a bad gradient has written nothing by then, as the CPU's throws before writing. Call it
  // once the update has let its variables go (guarded), so that this wait holds no variable's lock.
  void report() {
    device_of(ctx_).enqueue_report(word(), sizeof(Verdict), [var = ctx_.var(0).name(), n = n_](const void* host) {
      throw_if_non_finite(*static_cast<const Verdict*>(host), var, n);
    });
  }

 private:
  const KernelContext& ctx_;
  std::int64_t n_;
  Tensor verdict_;
};

// Runs queue(guard), which takes the variables and queues the update kernel, then the guard's report.
template <class Queue>
void guarded(const KernelContext& ctx, Queue queue) {
  Guard guard(ctx);
  queue(guard);
  guard.report();
}

// Sets p[i] = f(p[i]) and returns the new value, as Variable::Update::apply does: by compare-and-swap on
// the float's bits in `atomic` mode (f may run again), else a plain load and store (the locked modes own
// the buffer; `none` and `dataflow` may lose a concurrent update, as on the CPU).
template <class F>
__device__ float apply(float* p, std::int64_t i, bool cas, F f) {
  if (!cas) return p[i] = f(p[i]);
  auto* cell = reinterpret_cast<unsigned*>(p + i);
  unsigned old = *cell;
  for (;;) {
    const float y = f(__uint_as_float(old));
    const unsigned seen = atomicCAS(cell, old, __float_as_uint(y));
    if (seen == old) return y;
    old = seen;
  }
}

// What every update kernel reads besides its buffers: the gradient, the learning rate (a device scalar),
// the guard's verdict, the element count, whether the buffers take compare-and-swap, and whether the
// kernel finds the verdict itself (a one-block update).
struct Step {
  const float* g;
  const float* lr;
  Verdict* verdict;
  std::int64_t n;
  bool cas;
  bool checks;
};

// A one-block update's guard: the block finds the first non-finite element of the gradient (each thread
// its first, then the least of them in a tree), writes the verdict and says whether all are finite.
__device__ bool block_finds_all_finite(const Step& s) {
  __shared__ Verdict first[kBlock];
  Verdict v = kAllFinite;
  for (std::int64_t i = threadIdx.x; i < s.n; i += blockDim.x)
    if (!isfinite(s.g[i])) {
      v = 2 * static_cast<Verdict>(i) + (isinf(s.g[i]) ? 1 : 0);
      break;  // this thread's later elements come after i
    }
  first[threadIdx.x] = v;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) first[threadIdx.x] = min(first[threadIdx.x], first[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) *s.verdict = first[0];
  return first[0] == kAllFinite;
}

// body(i) for every element, or for none when the guard found a non-finite gradient.
template <class Body>
__device__ void for_each_unless_bad(const Step& s, Body body) {
  if (s.checks ? !block_finds_all_finite(s) : *s.verdict != kAllFinite) return;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < s.n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    body(i);
}

// The Updates of one kernel: whether any takes compare-and-swap (the slots share their variable's mode).
bool any_cas(std::initializer_list<const Variable::Update*> updates) {
  for (const auto* u : updates)
    if (u != nullptr && u->compare_and_swap()) return true;
  return false;
}

// Queues `kernel` over the update's elements; empty variables queue nothing.
template <class... Args>
void launch_update(const KernelContext& ctx, Guard& guard, const Variable::Update& w, bool cas,
                   void (*kernel)(Step, Args...), std::type_identity_t<Args>... args) {
  TCTL_CHECK(w.size() == guard.size(), "an update's gradient and variable differ in size");
  const Step s{in<float>(ctx, 0), in<float>(ctx, 1), guard.word(), w.size(), cas, guard.update_checks()};
  if (s.n > 0) kernel<<<update_grid(ctx, s.n), kBlock, 0, stream_of(ctx)>>>(s, args...);
  check_launch(ctx);
}

// Each update's arithmetic on element i, with gradient element g, shared by its own kernel and FusedUpdate's.
__device__ void sgd_at(std::int64_t i, float g, bool cas, float lr, float* w) {
  apply(w, i, cas, [&](float x) { return sub(x, mul(lr, g)); });
}

__global__ void sgd(Step s, float* w) {
  const float lr = *s.lr;
  for_each_unless_bad(s, [&](std::int64_t i) { sgd_at(i, s.g[i], s.cas, lr, w); });
}

__device__ void momentum_at(std::int64_t i, float g, bool cas, float lr, float* w, float* v, float mu, bool nesterov) {
  const float vi = apply(v, i, cas, [&](float old) { return sub(mul(mu, old), mul(lr, g)); });
  apply(w, i, cas, [&](float x) { return add(x, nesterov ? sub(mul(mu, vi), mul(lr, g)) : vi); });
}

__global__ void momentum(Step s, float* w, float* v, float mu, bool nesterov) {
  const float lr = *s.lr;
  for_each_unless_bad(s, [&](std::int64_t i) { momentum_at(i, s.g[i], s.cas, lr, w, v, mu, nesterov); });
}

struct AdamRule {
  float b1, b2, eps;
  double weight_decay;
};

// lr_t = lr sqrt(1 - b2^t) / (1 - b1^t) and the AdamW decay lr wd, in double as the CPU forms them, then
// rounded to float; t counts this step. Each block forms them once, on the device: two pows are cheaper than
// a host wait, but not free in every one of a large variable's million threads.
__device__ void adam_rates(const AdamRule& r, float lr_f, float steps_done, float& lr_t, float& decay) {
  const double lr = lr_f;
  const double t = static_cast<double>(steps_done) + 1.0;
  lr_t = static_cast<float>(lr * sqrt(1.0 - pow(static_cast<double>(r.b2), t)) /
                            (1.0 - pow(static_cast<double>(r.b1), t)));
  decay = static_cast<float>(lr * r.weight_decay);
}

__device__ void adam_at(std::int64_t i, float g, bool cas, float lr_t, float decay, const AdamRule& r, float* w,
                        float* m, float* v) {
  const float mi = apply(m, i, cas, [&](float old) { return add(mul(r.b1, old), mul(sub(1.0f, r.b1), g)); });
  const float vi = apply(v, i, cas, [&](float old) { return add(mul(r.b2, old), mul(mul(sub(1.0f, r.b2), g), g)); });
  apply(w, i, cas, [&](float x) {
    const float y = sub(x, mul(decay, x));
    return sub(y, divide(mul(lr_t, mi), add(root(vi), r.eps)));
  });
}

__global__ void adam(Step s, float* w, float* m, float* v, const float* steps_done, AdamRule r) {
  __shared__ float rates[2];
  if (threadIdx.x == 0) adam_rates(r, *s.lr, *steps_done, rates[0], rates[1]);
  __syncthreads();
  const float lr_t = rates[0], decay = rates[1];
  for_each_unless_bad(s, [&](std::int64_t i) { adam_at(i, s.g[i], s.cas, lr_t, decay, r, w, m, v); });
}

struct RmsPropRule {
  float rho, mu, eps;
};

// mg and mom are null when the update is not centered, or has no momentum.
__device__ void rmsprop_at(std::int64_t i, float g, bool cas, float lr, const RmsPropRule& r, float* w, float* ms,
                           float* mg, float* mom) {
  const float msi =
      apply(ms, i, cas, [&](float old) { return add(mul(r.rho, old), mul(mul(sub(1.0f, r.rho), g), g)); });
  float denominator = add(msi, r.eps);
  if (mg != nullptr) {
    const float mgi = apply(mg, i, cas, [&](float old) { return add(mul(r.rho, old), mul(sub(1.0f, r.rho), g)); });
    denominator = add(sub(msi, mul(mgi, mgi)), r.eps);
  }
  const float increment = divide(mul(lr, g), root(denominator));
  const float step =
      mom == nullptr ? increment : apply(mom, i, cas, [&](float old) { return add(mul(r.mu, old), increment); });
  apply(w, i, cas, [&](float x) { return sub(x, step); });
}

__global__ void rmsprop(Step s, float* w, float* ms, float* mg, float* mom, RmsPropRule r) {
  const float lr = *s.lr;
  for_each_unless_bad(s, [&](std::int64_t i) { rmsprop_at(i, s.g[i], s.cas, lr, r, w, ms, mg, mom); });
}

__device__ void adagrad_at(std::int64_t i, float g, bool cas, float lr, float eps, float* w, float* acc) {
  const float ai = apply(acc, i, cas, [&](float old) { return add(old, mul(g, g)); });
  apply(w, i, cas, [&](float x) { return sub(x, divide(mul(lr, g), root(add(ai, eps)))); });
}

__global__ void adagrad(Step s, float* w, float* acc, float eps) {
  const float lr = *s.lr;
  for_each_unless_bad(s, [&](std::int64_t i) { adagrad_at(i, s.g[i], s.cas, lr, eps, w, acc); });
}

void apply_sgd_cuda(KernelContext& ctx) {
  guarded(ctx, [&](Guard& guard) {
    Variable::Update w(ctx.var(0));
    launch_update(ctx, guard, w, any_cas({&w}), sgd, w.device_data());
  });
}

void apply_momentum_cuda(KernelContext& ctx) {
  const float mu = static_cast<float>(ctx.attrs().f("momentum"));
  const bool nesterov = ctx.attrs().i_or("nesterov", 0) != 0;
  guarded(ctx, [&](Guard& guard) {
    Variable::Update w(ctx.var(0));
    Variable::Update v(ctx.var(1));
    launch_update(ctx, guard, w, any_cas({&w, &v}), momentum, w.device_data(), v.device_data(), mu, nesterov);
  });
}

void apply_adam_cuda(KernelContext& ctx) {
  const AdamRule rule{static_cast<float>(ctx.attrs().f("beta1")), static_cast<float>(ctx.attrs().f("beta2")),
                      static_cast<float>(ctx.attrs().f("epsilon")), ctx.attrs().f_or("weight_decay", 0.0)};
  guarded(ctx, [&](Guard& guard) {
    Variable::Update w(ctx.var(0));
    Variable::Update m(ctx.var(1));
    Variable::Update v(ctx.var(2));
    launch_update(ctx, guard, w, any_cas({&w, &m, &v}), adam, w.device_data(), m.device_data(), v.device_data(),
                  in<float>(ctx, 2), rule);
  });
}

// Variables: w, ms, then mg when centered, then mom when momentum > 0.
void apply_rmsprop_cuda(KernelContext& ctx) {
  const RmsPropRule rule{static_cast<float>(ctx.attrs().f("rho")), static_cast<float>(ctx.attrs().f("momentum")),
                         static_cast<float>(ctx.attrs().f("epsilon"))};
  const bool centered = ctx.attrs().i("centered") != 0;
  guarded(ctx, [&](Guard& guard) {
    Variable::Update w(ctx.var(0));
    Variable::Update ms(ctx.var(1));
    std::optional<Variable::Update> mg, mom;
    int next = 2;
    if (centered) mg.emplace(ctx.var(next++));
    if (rule.mu > 0.0f) mom.emplace(ctx.var(next++));
    const bool cas = any_cas({&w, &ms, mg ? &*mg : nullptr, mom ? &*mom : nullptr});
    launch_update(ctx, guard, w, cas, rmsprop, w.device_data(), ms.device_data(), mg ? mg->device_data() : nullptr,
                  mom ? mom->device_data() : nullptr, rule);
  });
}

void apply_adagrad_cuda(KernelContext& ctx) {
  const float eps = static_cast<float>(ctx.attrs().f("epsilon"));
  guarded(ctx, [&](Guard& guard) {
    Variable::Update w(ctx.var(0));
    Variable::Update acc(ctx.var(1));
    launch_update(ctx, guard, w, any_cas({&w, &acc}), adagrad, w.device_data(), acc.device_data(), eps);
  });
}

// acc = share * g, or acc + share * g when *keep is not 0; the share rides in the Step's rate.
__global__ void accumulate(Step s, float* acc, const float* keep) {
  const float share = *s.lr;
  const bool add_to = *keep != 0.0f;
  for_each_unless_bad(s, [&](std::int64_t i) {
    const float g = s.g[i];
    apply(acc, i, s.cas, [&](float x) { return add_to ? add(x, mul(share, g)) : mul(share, g); });
  });
}

void accumulate_gradient_cuda(KernelContext& ctx) {
  guarded(ctx, [&](Guard& guard) {
    Variable::Update acc(ctx.var(0));
    launch_update(ctx, guard, acc, any_cas({&acc}), accumulate, acc.device_data(), in<float>(ctx, 2));
  });
}

// avg = m avg + (1 - m) x, m = momentum, or 0 while *steps_done is 0.
__global__ void moving_average(const float* x, const float* steps_done, float momentum, float* avg, std::int64_t n,
                               bool cas) {
  const float m = *steps_done != 0.0f ? momentum : 0.0f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    apply(avg, i, cas, [&](float a) { return add(mul(m, a), mul(sub(1.0f, m), x[i])); });
}

void moving_average_cuda(KernelContext& ctx) {
  Variable::Update avg(ctx.var(0));
  TCTL_CHECK(avg.size() == ctx.input(0).num_elements(), "a moving average and its weight differ in size");
  if (avg.size() > 0)
    moving_average<<<grid_for(avg.size()), kBlock, 0, stream_of(ctx)>>>(
        in<float>(ctx, 0), in<float>(ctx, 1), static_cast<float>(ctx.attrs().f("momentum")), avg.device_data(),
        avg.size(), avg.compare_and_swap());
  check_launch(ctx);
}

__global__ void increment(float* w, std::int64_t n, bool cas, float amount) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    apply(w, i, cas, [&](float x) { return add(x, amount); });
}

void increment_cuda(KernelContext& ctx) {
  Variable::Update w(ctx.var(0));
  const float amount = static_cast<float>(ctx.attrs().f("amount"));
  if (w.size() > 0)
    increment<<<grid_for(w.size()), kBlock, 0, stream_of(ctx)>>>(w.device_data(), w.size(), w.compare_and_swap(),
                                                                 amount);
  check_launch(ctx);
}

// The sum of every thread's s in a fixed tree (the same bits on every run). kBlock threads; the result is
// thread 0's.
__device__ double block_sum(double s) {
  __shared__ double sums[kBlock];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  return sums[0];
}

// Block b's sum of squares of g, in double, into partials[b]. A float's square is exact in double (so an
// FMA here changes nothing): only the order of the additions differs from the CPU's.
__global__ void sum_squares(const float* g, std::int64_t n, double* partials) {
  double s = 0.0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    s += static_cast<double>(g[i]) * g[i];
  const double total = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// One block: norm = sqrt(sum of the partials), rounded to float as the CPU's.
__global__ void finish_norm(const double* partials, std::int64_t count, float* norm) {
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < count; i += kBlock) s += partials[i];
  const double total = block_sum(s);
  if (threadIdx.x == 0) *norm = static_cast<float>(sqrt(total));
}

// Partial sums per input: enough blocks to fill the GPU on a large gradient, one per 256 elements below.
constexpr std::int64_t kMaxNormBlocks = 512;

void global_norm_cuda(KernelContext& ctx) {
  std::vector<std::int64_t> blocks(static_cast<std::size_t>(ctx.num_inputs()));
  std::int64_t total = 0;
  for (int k = 0; k < ctx.num_inputs(); ++k)
    total += blocks[static_cast<std::size_t>(k)] =
        std::min<std::int64_t>(grid_for(ctx.input(k).num_elements()), kMaxNormBlocks);
  // Doubles, held in 8-byte integers (the tensor's dtype only sizes the scratch).
  const Tensor scratch = Tensor::empty(DType::kI64, Shape{std::max<std::int64_t>(total, 1)}, &ctx.device());
  auto* partials = static_cast<double*>(scratch.raw_mutable_data());
  std::int64_t offset = 0;
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    const std::int64_t b = blocks[static_cast<std::size_t>(k)];
    if (b > 0)
      sum_squares<<<static_cast<unsigned>(b), kBlock, 0, stream_of(ctx)>>>(
          in<float>(ctx, k), ctx.input(k).num_elements(), partials + offset);
    offset += b;
  }
  finish_norm<<<1, kBlock, 0, stream_of(ctx)>>>(partials, total, out<float>(ctx));
  check_launch(ctx);
}

// y = g * min(1, clipnorm / norm), the scale formed in double from the device's norm; a norm that is not
// finite leaves g as it is, for the update's guard to report.
__global__ void clip(const float* g, const float* norm_f, double clipnorm, float* y, std::int64_t n) {
  const double norm = *norm_f;
  const float scale = isfinite(norm) && norm > clipnorm ? static_cast<float>(clipnorm / norm) : 1.0f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    y[i] = g[i] * scale;
}

void clip_by_global_norm_cuda(KernelContext& ctx) {
  const std::int64_t n = ctx.input(0).num_elements();
  float* y = out<float>(ctx);
  if (n > 0)
    clip<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(in<float>(ctx, 0), in<float>(ctx, 1), ctx.attrs().f("clipnorm"), y,
                                                     n);
  check_launch(ctx);
}

// FusedUpdate (core/ops/optimizers.cpp): one of the updates above for every variable of the node, in two
// launches whatever their count: the guard over every gradient, then the update over every variable, both
// walking the variables' elements as one sequence through a table the host copies to the device. Each
// element gets its own update's arithmetic (the *_at functions), so the bits are those of the separate
// kernels. A non-finite element anywhere leaves every variable unwritten, as on the CPU.
// Written without a GPU at hand (2026-11-30): until the GPU check has compared it with the CPU
// (tests/kernels/optimizers_test.cpp in device mode), placement uses it only with TCTL_CUDA_FUSED_UPDATES=1.
struct FusedEntry {
  const float* g;
  float* w;
  float* slot[3];      // an update's slots in its op's order; rmsprop's: ms, mg or null, mom or null
  std::int64_t begin;  // the entry's first element among all the entries' elements
  std::int64_t n;
  bool cas;
};

// body(entry, i) for every element of every entry, each thread walking the sequence with a stride and moving
// its entry forward as it goes (the entries are few; their sizes any, empty ones included).
template <class Body>
__device__ void for_each_fused_element(const FusedEntry* entries, std::int64_t total, Body body) {
  int at = 0;
  for (std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; j < total;
       j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    while (j >= entries[at].begin + entries[at].n) ++at;
    body(entries[at], j - entries[at].begin);
  }
}

__global__ void find_non_finite_fused(const FusedEntry* entries, std::int64_t total, Verdict* verdict) {
  for_each_fused_element(entries, total, [&](const FusedEntry& e, std::int64_t i) {
    if (!isfinite(e.g[i])) atomicMin(verdict, 2 * static_cast<Verdict>(e.begin + i) + (isinf(e.g[i]) ? 1 : 0));
  });
}

// The scalars of a fused update, as its op reads them.
struct FusedRule {
  int kind;  // 0 sgd, 1 momentum, 2 adam, 3 rmsprop, 4 adagrad
  float mu;
  bool nesterov;
  AdamRule adam;
  RmsPropRule rmsprop;
  float eps;
};

__global__ void fused_update(const FusedEntry* entries, std::int64_t total, const Verdict* verdict, const float* lr_p,
                             const float* steps_done, FusedRule r) {
  __shared__ float rates[2];
  if (r.kind == 2 && threadIdx.x == 0) adam_rates(r.adam, *lr_p, *steps_done, rates[0], rates[1]);
  __syncthreads();
  if (*verdict != kAllFinite) return;
  const float lr = *lr_p;
  for_each_fused_element(entries, total, [&](const FusedEntry& e, std::int64_t i) {
    const float g = e.g[i];
    switch (r.kind) {
      case 0:
        sgd_at(i, g, e.cas, lr, e.w);
        break;
      case 1:
        momentum_at(i, g, e.cas, lr, e.w, e.slot[0], r.mu, r.nesterov);
        break;
      case 2:
        adam_at(i, g, e.cas, rates[0], rates[1], r.adam, e.w, e.slot[0], e.slot[1]);
        break;
      case 3:
        rmsprop_at(i, g, e.cas, lr, r.rmsprop, e.w, e.slot[0], e.slot[1], e.slot[2]);
        break;
      default:
        adagrad_at(i, g, e.cas, lr, r.eps, e.w, e.slot[0]);
        break;
    }
  });
}

FusedRule fused_rule(const Attrs& a) {
  const std::string& update = a.s("update");
  FusedRule r{};
  if (update == "ApplyMomentum") {
    r.kind = 1;
    r.mu = static_cast<float>(a.f("momentum"));
    r.nesterov = a.i_or("nesterov", 0) != 0;
  } else if (update == "ApplyAdam") {
    r.kind = 2;
    r.adam = {static_cast<float>(a.f("beta1")), static_cast<float>(a.f("beta2")), static_cast<float>(a.f("epsilon")),
              a.f_or("weight_decay", 0.0)};
  } else if (update == "ApplyRmsProp") {
    r.kind = 3;
    r.rmsprop = {static_cast<float>(a.f("rho")), static_cast<float>(a.f("momentum")),
                 static_cast<float>(a.f("epsilon"))};
  } else if (update == "ApplyAdagrad") {
    r.kind = 4;
    r.eps = static_cast<float>(a.f("epsilon"));
  }
  return r;
}

// Variable k's run of `per` Updates (held until the kernels are queued, as the separate kernels hold theirs)
// and its entry in the table.
FusedEntry fused_entry(const KernelContext& ctx, const FusedRule& r, int k, std::size_t per, std::int64_t begin,
                       std::vector<std::unique_ptr<Variable::Update>>& held) {
  FusedEntry e{in<float>(ctx, k), nullptr, {nullptr, nullptr, nullptr}, begin, ctx.input(k).num_elements(), false};
  std::vector<float*> buffers;
  for (std::size_t j = 0; j < per; ++j) {
    held.push_back(
        std::make_unique<Variable::Update>(ctx.var(static_cast<int>(static_cast<std::size_t>(k) * per + j))));
    buffers.push_back(held.back()->device_data());
    e.cas = e.cas || held.back()->compare_and_swap();
    TCTL_CHECK(held.back()->size() == e.n, "a fused update's gradient and variable differ in size");
  }
  e.w = buffers[0];
  if (r.kind == 3) {  // ms, then mg when centered, then mom when momentum > 0
    std::size_t next = 1;
    e.slot[0] = buffers[next++];
    if (ctx.attrs().i("centered") != 0) e.slot[1] = buffers[next++];
    if (r.rmsprop.mu > 0.0f) e.slot[2] = buffers[next++];
  } else {
    for (std::size_t j = 1; j < buffers.size() && j <= 3; ++j) e.slot[j - 1] = buffers[j];
  }
  return e;
}

void fused_update_cuda(KernelContext& ctx) {
  CudaDevice& device = device_of(ctx);
  const FusedRule rule = fused_rule(ctx.attrs());
  const int count = static_cast<int>(ctx.attrs().i("variables"));
  std::vector<std::unique_ptr<Variable::Update>> held;
  std::vector<FusedEntry> table;
  std::vector<std::string> names;
  const std::size_t per = ctx.node().vars.size() / static_cast<std::size_t>(count);
  std::int64_t total = 0;
  for (int k = 0; k < count; ++k) {
    table.push_back(fused_entry(ctx, rule, k, per, total, held));
    names.push_back(ctx.var(static_cast<int>(static_cast<std::size_t>(k) * per)).name());
    total += table.back().n;
  }
  const std::size_t bytes = table.size() * sizeof(FusedEntry);
  Tensor on_device = Tensor::empty(DType::kI64, Shape{static_cast<std::int64_t>((bytes + 7) / 8)}, &device);
  device.copy_from_host(on_device.raw_mutable_data(), table.data(), bytes);
  const auto* entries = static_cast<const FusedEntry*>(on_device.raw_data());
  Tensor verdict = Tensor::empty(DType::kI64, Shape{1}, &device);
  auto* word = static_cast<Verdict*>(verdict.raw_mutable_data());
  check(cudaMemsetAsync(word, 0xff, sizeof(Verdict), stream_of(ctx)), device.name(), "cudaMemsetAsync");
  if (total > 0) {
    const unsigned grid = update_grid(ctx, total);
    find_non_finite_fused<<<grid, kBlock, 0, stream_of(ctx)>>>(entries, total, word);
    fused_update<<<grid, kBlock, 0, stream_of(ctx)>>>(entries, total, word, in<float>(ctx, count),
                                                      rule.kind == 2 ? in<float>(ctx, count + 1) : nullptr, rule);
  }
  check_launch(ctx);
  held.clear();  // the variables go before the report, whose wait (on an own stream) must hold no lock
  std::vector<std::int64_t> begins;
  for (const FusedEntry& e : table) begins.push_back(e.begin);
  device.enqueue_report(word, sizeof(Verdict), [names, begins, total](const void* host) {
    const Verdict v = *static_cast<const Verdict*>(host);
    if (v == kAllFinite) return;
    const auto at = static_cast<std::int64_t>(v >> 1);
    std::size_t k = 0;
    while (k + 1 < begins.size() && begins[k + 1] <= at) ++k;
    const std::int64_t end = k + 1 < begins.size() ? begins[k + 1] : total;
    throw_if_non_finite(2 * static_cast<Verdict>(at - begins[k]) + (v & 1), names[k], end - begins[k]);
  });
}

}  // namespace

TCTL_REGISTER_KERNELS("cuda", {"ApplySgd", apply_sgd_cuda}, {"ApplyMomentum", apply_momentum_cuda},
                      {"ApplyAdam", apply_adam_cuda}, {"ApplyRmsProp", apply_rmsprop_cuda},
                      {"ApplyAdagrad", apply_adagrad_cuda}, {"FusedUpdate", fused_update_cuda},
                      {"Increment", increment_cuda}, {"AccumulateGradient", accumulate_gradient_cuda},
                      {"MovingAverage", moving_average_cuda}, {"GlobalNorm", global_norm_cuda},
                      {"ClipByGlobalNorm", clip_by_global_norm_cuda});

}  // namespace tctl::cuda
