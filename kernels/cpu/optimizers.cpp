// CPU kernels of the optimizer updates (definitions in core/ops/optimizers.cpp). Each is one fused pass per
// variable that writes the variable (and its slots) in place under the variable's lock. Inputs: the
// gradient, the learning rate (a float scalar read of the optimizer's learning-rate variable, so a schedule
// changes it without retracing), and for Adam the number of steps completed before this one (a float scalar
// read of the step counter). The output is unused. Every update first checks its gradient and throws
// NonFiniteError, naming the variable, before writing. FusedUpdate runs one of them for many variables,
// checking every gradient first. Also here: GlobalNorm and ClipByGlobalNorm, the gradient clipping that feeds
// the updates.
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/kernel_util.h"

namespace tctl::cpu {
namespace {

// Elements per intra-op block of an update pass.
constexpr std::int64_t kUpdateGrain = 32768;

// One variable's update: its gradient, its variables (the weight, then its slots: VarUse entries of the node)
// and the node's scalar inputs (the learning rate, then Adam's steps done). A FusedUpdate node holds many.
struct OneUpdate {
  const float* g;
  std::int64_t n;  // the gradient's elements
  std::span<const VarUse> vars;
  float lr;
  float steps_done;  // Adam's; unused by the others
  Variable& var(std::size_t j) const { return *vars[j].var; }
};
using UpdatePass = void (*)(const KernelContext&, const OneUpdate&);

// Update `index` of a node whose inputs are `count` gradients and then its scalars, and whose variables are
// `count` runs of the same length.
OneUpdate one_update(const KernelContext& ctx, int index, int count) {
  const Tensor& grad = ctx.input(index);
  const std::size_t per = ctx.node().vars.size() / static_cast<std::size_t>(count);
  return {grad.data<float>(), grad.num_elements(),
          std::span<const VarUse>(ctx.node().vars).subspan(static_cast<std::size_t>(index) * per, per),
          ctx.input(count).data<float>()[0],
          ctx.num_inputs() > count + 1 ? ctx.input(count + 1).data<float>()[0] : 0.0f};
}

// The numeric guard, one pass before anything is written (any_non_finite), cut into the update's own blocks,
// so with several intra-op threads each reads its part at once.
void check_gradient(const KernelContext& ctx, const float* g, std::int64_t n, const Variable& var) {
  if (!any_non_finite(ctx, g, n, kUpdateGrain)) [[likely]]
    return;
  std::int64_t first = 0;
  while (std::isfinite(g[first])) ++first;
  throw NonFiniteError("gradient of " + var.name() + " is " + (std::isnan(g[first]) ? "NaN" : "infinite") +
                       " (element " + std::to_string(first) + " of " + std::to_string(n) + ")");
}
void check_gradient(const KernelContext& ctx) {
  check_gradient(ctx, ctx.input(0).data<float>(), ctx.input(0).num_elements(), ctx.var(0));
}

// An update op's kernel: its one variable's guard, then its pass.
template <UpdatePass pass>
void apply_one(KernelContext& ctx) {
  const OneUpdate u = one_update(ctx, 0, 1);
  check_gradient(ctx, u.g, u.n, u.var(0));
  pass(ctx, u);
}

// Every update goes through Variable::Update, so it honours the variable's locking mode: under its lock, by
// compare-and-swap, or unsynchronized. The slots share their variable's mode. When every Update owns its
// buffer (the locked modes), a kernel runs one plain loop the compiler can vectorise; otherwise it sets
// each element with apply().
bool all_owned(std::initializer_list<const Variable::Update*> updates) {
  for (const auto* u : updates)
    if (u != nullptr && u->data() == nullptr) return false;
  return true;
}

// w -= lr * g
void sgd_pass(const KernelContext& ctx, const OneUpdate& u) {
  const float lr = u.lr;
  const float* g = u.g;
  Variable::Update w(u.var(0));
  ctx.parallel_for(w.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) w.apply(i, [&](float x) { return x - lr * g[i]; });
  });
}

// Keras' formulation: v = momentum * v - lr * g; w += v (nesterov: w += momentum * v - lr * g).
void momentum_pass(const KernelContext& ctx, const OneUpdate& u) {
  const float lr = u.lr;
  const float mu = static_cast<float>(ctx.attrs().f("momentum"));
  const bool nesterov = ctx.attrs().i_or("nesterov", 0) != 0;
  const float* g = u.g;
  Variable::Update w(u.var(0));
  Variable::Update v(u.var(1));
  ctx.parallel_for(w.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    if (all_owned({&w, &v})) {
      float* pw = w.data();
      float* pv = v.data();
      for (std::int64_t i = b; i < e; ++i) {
        pv[i] = mu * pv[i] - lr * g[i];
        pw[i] += nesterov ? mu * pv[i] - lr * g[i] : pv[i];
      }
      return;
    }
    for (std::int64_t i = b; i < e; ++i) {
      float vi = 0.0f;
      v.apply(i, [&](float old) { return vi = mu * old - lr * g[i]; });
      w.apply(i, [&](float x) { return x + (nesterov ? mu * vi - lr * g[i] : vi); });
    }
  });
}

// Keras' Adam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr_t m / (sqrt(v) + eps) with
// lr_t = lr sqrt(1 - b2^t) / (1 - b1^t). AdamW (weight_decay > 0) first decays w -= lr wd w, as Keras'
// and PyTorch's AdamW do, decoupled from the gradient.
void adam_pass(const KernelContext& ctx, const OneUpdate& u) {
  const double lr = u.lr;
  const float b1 = static_cast<float>(ctx.attrs().f("beta1"));
  const float b2 = static_cast<float>(ctx.attrs().f("beta2"));
  const float eps = static_cast<float>(ctx.attrs().f("epsilon"));
  const float decay = static_cast<float>(lr * ctx.attrs().f_or("weight_decay", 0.0));
  const double t = static_cast<double>(u.steps_done) + 1.0;
  const float lr_t = static_cast<float>(lr * std::sqrt(1.0 - std::pow(static_cast<double>(b2), t)) /
                                        (1.0 - std::pow(static_cast<double>(b1), t)));
  const float* g = u.g;
  Variable::Update w(u.var(0));
  Variable::Update m(u.var(1));
  Variable::Update v(u.var(2));
  ctx.parallel_for(w.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    if (all_owned({&w, &m, &v})) {
      float* pw = w.data();
      float* pm = m.data();
      float* pv = v.data();
      // Local copies: the captured references could alias the stores, and reloading them each element
      // keeps gcc from vectorising the loop.
      const float cb1 = b1, cb2 = b2, ceps = eps, cdecay = decay, clr_t = lr_t;
      for (std::int64_t i = b; i < e; ++i) {
        pm[i] = cb1 * pm[i] + (1.0f - cb1) * g[i];
        pv[i] = cb2 * pv[i] + (1.0f - cb2) * g[i] * g[i];
        const float x = pw[i] - cdecay * pw[i];
        pw[i] = x - clr_t * pm[i] / (std::sqrt(pv[i]) + ceps);
      }
      return;
    }
    for (std::int64_t i = b; i < e; ++i) {
      float mi = 0.0f, vi = 0.0f;
      m.apply(i, [&](float old) { return mi = b1 * old + (1.0f - b1) * g[i]; });
      v.apply(i, [&](float old) { return vi = b2 * old + (1.0f - b2) * g[i] * g[i]; });
      w.apply(i, [&](float x) {
        const float y = x - decay * x;
        return y - lr_t * mi / (std::sqrt(vi) + eps);
      });
    }
  });
}

// Keras' RMSprop: ms = rho ms + (1-rho) g^2; centered: mg = rho mg + (1-rho) g, denominator ms - mg^2 + eps,
// else ms + eps; step = lr g / sqrt(denominator); with momentum: mom = momentum mom + step; w -= mom.
// Variables: w, ms, then mg when centered, then mom when momentum > 0.
void rmsprop_pass(const KernelContext& ctx, const OneUpdate& u) {
  const float lr = u.lr;
  const float rho = static_cast<float>(ctx.attrs().f("rho"));
  const float mu = static_cast<float>(ctx.attrs().f("momentum"));
  const float eps = static_cast<float>(ctx.attrs().f("epsilon"));
  const bool centered = ctx.attrs().i("centered") != 0;
  const float* g = u.g;
  Variable::Update w(u.var(0));
  Variable::Update ms(u.var(1));
  std::optional<Variable::Update> mg, mom;
  std::size_t next = 2;
  if (centered) mg.emplace(u.var(next++));
  if (mu > 0.0f) mom.emplace(u.var(next++));
  ctx.parallel_for(w.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    if (all_owned({&w, &ms, mg ? &*mg : nullptr, mom ? &*mom : nullptr})) {
      float* pw = w.data();
      float* pms = ms.data();
      float* pmg = mg ? mg->data() : nullptr;
      float* pmom = mom ? mom->data() : nullptr;
      // One branch-free loop per variant, with local copies of the scalars, so gcc vectorises each.
      auto run = [&]<bool kCentered, bool kMomentum>() {
        const float crho = rho, cmu = mu, ceps = eps, clr = lr;
        for (std::int64_t i = b; i < e; ++i) {
          pms[i] = crho * pms[i] + (1.0f - crho) * g[i] * g[i];
          float denominator = pms[i] + ceps;
          if constexpr (kCentered) {
            pmg[i] = crho * pmg[i] + (1.0f - crho) * g[i];
            denominator = pms[i] - pmg[i] * pmg[i] + ceps;
          }
          float step = clr * g[i] / std::sqrt(denominator);
          if constexpr (kMomentum) step = pmom[i] = cmu * pmom[i] + step;
          pw[i] -= step;
        }
      };
      if (pmg && pmom)
        run.template operator()<true, true>();
      else if (pmg)
        run.template operator()<true, false>();
      else if (pmom)
        run.template operator()<false, true>();
      else
        run.template operator()<false, false>();
      return;
    }
    for (std::int64_t i = b; i < e; ++i) {
      float msi = 0.0f;
      ms.apply(i, [&](float old) { return msi = rho * old + (1.0f - rho) * g[i] * g[i]; });
      float denominator = msi + eps;
      if (mg) {
        float mgi = 0.0f;
        mg->apply(i, [&](float old) { return mgi = rho * old + (1.0f - rho) * g[i]; });
        denominator = msi - mgi * mgi + eps;
      }
      // apply() may call its function again when a compare-and-swap fails, so each one only reads what it
      // does not write.
      const float increment = lr * g[i] / std::sqrt(denominator);
      float step = increment;
      if (mom) mom->apply(i, [&](float old) { return step = mu * old + increment; });
      w.apply(i, [&](float x) { return x - step; });
    }
  });
}

// Keras' Adagrad: acc += g^2; w -= lr g / sqrt(acc + eps). Variables: w, acc.
void adagrad_pass(const KernelContext& ctx, const OneUpdate& u) {
  const float lr = u.lr;
  const float eps = static_cast<float>(ctx.attrs().f("epsilon"));
  const float* g = u.g;
  Variable::Update w(u.var(0));
  Variable::Update acc(u.var(1));
  ctx.parallel_for(w.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    if (all_owned({&w, &acc})) {
      float* pw = w.data();
      float* pa = acc.data();
      for (std::int64_t i = b; i < e; ++i) {
        pa[i] += g[i] * g[i];
        pw[i] -= lr * g[i] / std::sqrt(pa[i] + eps);
      }
      return;
    }
    for (std::int64_t i = b; i < e; ++i) {
      float ai = 0.0f;
      acc.apply(i, [&](float old) { return ai = old + g[i] * g[i]; });
      w.apply(i, [&](float x) { return x - lr * g[i] / std::sqrt(ai + eps); });
    }
  });
}

UpdatePass pass_of(const std::string& update) {
  if (update == "ApplySgd") return sgd_pass;
  if (update == "ApplyMomentum") return momentum_pass;
  if (update == "ApplyAdam") return adam_pass;
  if (update == "ApplyRmsProp") return rmsprop_pass;
  TCTL_CHECK(update == "ApplyAdagrad", "FusedUpdate of an unknown update " + update);
  return adagrad_pass;
}

// Every variable's gradient is checked before any is written: a gradient that is not finite leaves every
// variable of the node as it was (per-variable nodes would have updated those that ran before it).
void fused_update_cpu(KernelContext& ctx) {
  const UpdatePass pass = pass_of(ctx.attrs().s("update"));
  const int count = static_cast<int>(ctx.attrs().i("variables"));
  std::vector<OneUpdate> updates;
  for (int k = 0; k < count; ++k) updates.push_back(one_update(ctx, k, count));
  for (const OneUpdate& u : updates) check_gradient(ctx, u.g, u.n, u.var(0));
  for (const OneUpdate& u : updates) pass(ctx, u);
}

// var += amount (a float scalar attribute); counts optimizer steps.
void increment_cpu(KernelContext& ctx) {
  Variable::Update w(ctx.var(0));
  const float amount = static_cast<float>(ctx.attrs().f("amount"));
  for (std::int64_t i = 0; i < w.size(); ++i) w.apply(i, [&](float x) { return x + amount; });
}

// Gradient accumulation: acc = share * g, or acc + share * g when keep (input 2) is not 0. The share is this
// step's rows over the update's, so the accumulated sum is the large batch's mean gradient.
void accumulate_gradient_cpu(KernelContext& ctx) {
  check_gradient(ctx);
  const float share = ctx.input(1).data<float>()[0];
  const bool keep = ctx.input(2).data<float>()[0] != 0.0f;
  const float* g = ctx.input(0).data<float>();
  Variable::Update acc(ctx.var(0));
  ctx.parallel_for(acc.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    if (acc.data() != nullptr) {
      float* pa = acc.data();
      const float s = share;
      if (keep)
        for (std::int64_t i = b; i < e; ++i) pa[i] += s * g[i];
      else
        for (std::int64_t i = b; i < e; ++i) pa[i] = s * g[i];
      return;
    }
    for (std::int64_t i = b; i < e; ++i) acc.apply(i, [&](float x) { return keep ? x + share * g[i] : share * g[i]; });
  });
}

// avg = m avg + (1 - m) x, m = momentum, or 0 at the first update (steps_done, input 1, is 0): Keras' use_ema.
void moving_average_cpu(KernelContext& ctx) {
  const float m = ctx.input(1).data<float>()[0] != 0.0f ? static_cast<float>(ctx.attrs().f("momentum")) : 0.0f;
  const float* x = ctx.input(0).data<float>();
  Variable::Update avg(ctx.var(0));
  TCTL_CHECK(avg.size() == ctx.input(0).num_elements(), "a moving average and its weight differ in size");
  ctx.parallel_for(avg.size(), kUpdateGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) avg.apply(i, [&](float a) { return m * a + (1.0f - m) * x[i]; });
  });
}

// sqrt of the sum of squares of every element of every input, summed in double in one fixed order, so
// the norm is the same for any thread count.
void global_norm_cpu(KernelContext& ctx) {
  double sum = 0.0;
  for (int k = 0; k < ctx.num_inputs(); ++k) {
    const float* g = ctx.input(k).data<float>();
    const std::int64_t n = ctx.input(k).num_elements();
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
  }
  ctx.output().mutable_data<float>()[0] = static_cast<float>(std::sqrt(sum));
}

// Inputs: gradient, global norm. y = g * min(1, clipnorm / norm). A norm that is not finite leaves the
// gradient as it is, so the update's numeric guard reports the gradient that holds the NaN or infinity.
void clip_by_global_norm_cpu(KernelContext& ctx) {
  const double norm = ctx.input(1).data<float>()[0];
  const double clipnorm = ctx.attrs().f("clipnorm");
  const float scale = std::isfinite(norm) && norm > clipnorm ? static_cast<float>(clipnorm / norm) : 1.0f;
  const float* g = ctx.input(0).data<float>();
  float* y = ctx.output().mutable_data<float>();
  for_each_element(ctx, ctx.input(0).num_elements(), [&](std::int64_t i) { y[i] = g[i] * scale; });
}

}  // namespace

TCTL_REGISTER_KERNELS("cpu", {"ApplySgd", apply_one<sgd_pass>}, {"ApplyMomentum", apply_one<momentum_pass>},
                      {"ApplyAdam", apply_one<adam_pass>}, {"ApplyRmsProp", apply_one<rmsprop_pass>},
                      {"ApplyAdagrad", apply_one<adagrad_pass>}, {"FusedUpdate", fused_update_cpu},
                      {"Increment", increment_cpu}, {"AccumulateGradient", accumulate_gradient_cpu},
                      {"MovingAverage", moving_average_cpu}, {"GlobalNorm", global_norm_cpu},
                      {"ClipByGlobalNorm", clip_by_global_norm_cpu});

}  // namespace tctl::cpu
