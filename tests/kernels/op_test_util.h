// check_op: the shared harness for op tests. For one op and concrete inputs it checks that the shape the
// graph inferred matches what the kernel produced, that the gradient agrees with central finite
// differences, and that 1 and 2 intra-op threads give bit-identical outputs.
//
// In device mode (TCTL_TEST_DEVICE=cuda:0, the kernels_tests_cuda ctest entry) it also runs the op on that
// device, where it has a kernel there, and compares the result with the CPU's within the op's stated
// tolerance (device_tolerance), and runs the finite-difference check with the whole graph on the device.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/autodiff.h"
#include "core/op_registry.h"
#include "core/session.h"

namespace tctl::testing {

// Uniform floats in [-1, 1], away from 0 by at least `gap` (keeps finite differences off ReLU's kink).
inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, float gap = 0.0f) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(static_cast<std::size_t>(shape.num_elements()));
  for (auto& x : v) {
    float u = static_cast<float>(static_cast<double>(rng() >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
    if (std::abs(u) < gap) u = u < 0 ? u - gap : u + gap;
    x = u;
  }
  return Tensor::from_floats(shape, v);
}

struct OpCheck {
  Attrs attrs;
  // Inputs not to differentiate (labels, targets).
  std::vector<int> constant_inputs;
  float gap = 0.05f;
  double tolerance = 2e-2;
  bool check_gradient = true;
};

// The scalar loss sum(y * w) with fixed random weights w, so every element of y matters differently.
inline Output weighted_sum(Graph& g, Output y) {
  const Output w = g.constant(random_tensor(g.spec(y).shape, 99));
  return g.add("Sum", {g.add("Mul", {y, w})});
}

// A graph with one placeholder per input and `op` applied to them, plus the feeds for those inputs.
struct OpGraph {
  std::shared_ptr<Graph> graph = std::make_shared<Graph>();
  std::vector<Output> inputs;
  std::vector<Feed> feeds;
  Output y;
};

// The device the op tests also run on ("cuda:0"), or "" when they run on the CPU only.
inline std::string test_device() {
  const char* d = std::getenv("TCTL_TEST_DEVICE");
  return d == nullptr ? "" : d;
}

// True when the op has a kernel on the test device (so a comparison there means something).
inline bool runs_on_test_device(const std::string& op) {
  if (test_device().empty()) return false;
  const Device* d = DeviceRegistry::instance().find(test_device());
  return d != nullptr && op_def(op).kernel(d->kind()) != nullptr;
}

// How far the test device's result may be from the CPU's: |device - cpu| <= t * (1 + |cpu|). The CUDA
// kernels state theirs (kernels/cuda/*.cu): 0 where they do the CPU's float operations in its order (no
// fused multiply-add: the CPU is built with -ffp-contract=off and the kernels round each step), 1e-6 where
// a sum in double is added in another order or a libm function (expf, erff, tanhf) differs by an ulp or
// two, 1e-5 where a float row sum is a tree instead of left to right, 1e-4 (1e-3 for a kernel gradient's
// long sums) where cuBLAS and OpenBLAS order a product's sums differently or a softmax gradient cancels
// (dy - dot, p - t: a host emulation of the kernels measured up to 2.6e-4 absolute with unnormalised
// targets). Anything not listed: 1e-5.
inline double device_tolerance(const std::string& op) {
  static const std::map<std::string, double> stated = {
      {"Add", 0},
      {"Sub", 0},
      {"Mul", 0},
      {"Scale", 0},
      {"AddN", 0},
      {"ZerosLike", 0},
      {"SumGrad", 0},
      {"MeanGrad", 0},
      {"Concat", 0},
      {"SliceLastAxis", 0},
      {"PadLastAxis", 0},
      {"Reshape", 0},
      {"Relu", 0},
      {"ReluGrad", 0},
      {"LeakyRelu", 0},
      {"LeakyReluGrad", 0},
      {"SigmoidGrad", 0},
      {"TanhGrad", 0},
      {"Mse", 0},
      {"MseGrad", 0},
      {"Mae", 0},
      {"MaeGrad", 0},
      {"Huber", 0},
      {"HuberGrad", 0},
      {"BinaryXentGrad", 0},
      {"BiasAdd", 0},
      {"ApplySgd", 0},
      {"ApplyMomentum", 0},
      {"ApplyRmsProp", 0},
      {"ApplyAdagrad", 0},
      {"Increment", 0},
      {"ClipByGlobalNorm", 0},
      {"Dropout", 0},
      {"DropoutGrad", 0},
      {"MaxPool2D", 0},
      {"MaxPool2DGrad", 0},
      {"AvgPool2D", 0},
      {"AvgPool2DGrad", 0},
      {"BatchNorm", 0},
      {"BatchNormMeanGrad", 0},
      {"AssignMovingAverage", 0},
      {"BatchNormMean", 1e-6},
      {"BatchNormVariance", 1e-6},
      {"BatchNormVarianceGrad", 1e-6},
      {"BatchNormGrad", 1e-6},
      {"MatMul", 1e-4},
      {"FusedMatMul", 1e-4},
      {"SoftmaxGrad", 1e-4},
      {"SoftmaxXentGrad", 1e-4},
      {"SparseSoftmaxXentGrad", 1e-4},
      {"Conv2D", 1e-4},
      {"FusedConv2D", 1e-4},
      {"Conv2DInputGrad", 1e-4},
      {"Conv2DKernelGrad", 1e-3},
      {"Sum", 1e-6},
      {"Mean", 1e-6},
      {"Elu", 1e-6},
      {"EluGrad", 1e-6},
      {"Gelu", 1e-6},
      {"GeluGrad", 1e-6},
      {"Sigmoid", 1e-6},
      {"Tanh", 1e-6},
      {"BinaryXent", 1e-6},
      {"ApplyAdam", 1e-6},
      {"FusedUpdate", 1e-6},  // Adam's among them
      {"GlobalNorm", 1e-6},
      {"TokenMask", 0},
      {"Embedding", 0},
      {"PositionEmbedding", 0},
      {"GlobalAvgPool", 0},
      {"GlobalMaxPool", 0},
      {"SelfAttention", 1e-4},
  };
  const auto it = stated.find(op);
  return it == stated.end() ? 1e-5 : it->second;
}

inline OpGraph make_op_graph(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                             const std::string& device = "cpu") {
  OpGraph o;
  Graph::Scope on_device(*o.graph, "", device, Phase::kForward);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    o.inputs.push_back(o.graph->placeholder("in" + std::to_string(i), inputs[i].dtype(), inputs[i].shape()));
    o.feeds.push_back({o.inputs.back(), inputs[i]});
  }
  o.y = o.graph->add(op, o.inputs, attrs);
  return o;
}

// MatMul's attributes for op(a) = a^T when `a`, op(b) = b^T when `b`.
inline Attrs transposes(bool a, bool b) {
  return Attrs{{"transpose_a", std::int64_t{a}}, {"transpose_b", std::int64_t{b}}};
}

// Runs `op` on `inputs` with its products at `type` (a precision policy's compute type); returns its output.
// `intra` sets the intra-op thread count; with more than one, the pool ignores the kernels' grains, so even
// small inputs are cut over the threads and a comparison with one thread compares a parallel run (else both
// would run on one thread below the split size).
inline Tensor run_op_at(ComputeType type, const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                        int intra = 1, const std::string& device = "cpu") {
  OpGraph o = make_op_graph(op, inputs, attrs, device);
  ThreadPool inter(1), pool(intra, /*ignore_grain=*/intra > 1);
  SessionOptions options;
  options.placement.strict = true;
  options.compute_type = type;
  Session s(o.graph, inter, pool, options);
  std::vector<Output> fetch{o.y};
  RunOptions ro;
  ro.step = 3;
  Tensor out = s.run(o.feeds, fetch, {}, ro)[0];
  return out;
}

// run_op_at in float32, the default precision.
inline Tensor run_op(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs, int intra = 1,
                     const std::string& device = "cpu") {
  return run_op_at(ComputeType::kF32, op, inputs, attrs, intra, device);
}

// The op on the test device against the CPU's result `cpu`, element by element.
inline void compare_on_test_device(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                                   const Tensor& cpu) {
  const Tensor got = run_op(op, inputs, attrs, 1, test_device());
  REQUIRE(got.shape() == cpu.shape());
  REQUIRE(got.dtype() == cpu.dtype());
  const std::vector<float> a = got.to_floats(), b = cpu.to_floats();
  const double t = device_tolerance(op);
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(static_cast<double>(a[i]) - b[i]) <= t * (1.0 + std::abs(static_cast<double>(b[i]))));
  }
}

inline void check_op_inputs(const std::string& op, const std::vector<Tensor>& inputs, const OpCheck& check = {}) {
  CAPTURE(op);
  const bool on_device = runs_on_test_device(op);
  // In device mode the gradient check runs on the device: every node there that has a kernel there.
  OpGraph o = make_op_graph(op, inputs, check.attrs, on_device ? test_device() : "cpu");
  auto& g = o.graph;
  const auto& ins = o.inputs;
  const auto& feeds = o.feeds;
  const Output y = o.y;
  const TensorSpec inferred = g->spec(y);

  // Inferred vs produced, and thread-count independence.
  Tensor one = run_op(op, inputs, check.attrs, 1);
  Tensor two = run_op(op, inputs, check.attrs, 2);
  CHECK(one.shape() == inferred.shape);
  CHECK(one.dtype() == inferred.dtype);
  REQUIRE(one.bytes() == two.bytes());
  CHECK(std::memcmp(one.raw_data(), two.raw_data(), one.bytes()) == 0);
  if (on_device) compare_on_test_device(op, inputs, check.attrs, one);
  if (!check.check_gradient) return;

  Graph::Scope device_scope(*g, "", on_device ? test_device() : "cpu", Phase::kBackward);
  Output loss = weighted_sum(*g, y);
  std::vector<int> wrt;
  std::vector<Output> xs;
  for (int i = 0; i < static_cast<int>(inputs.size()); ++i) {
    if (std::find(check.constant_inputs.begin(), check.constant_inputs.end(), i) != check.constant_inputs.end())
      continue;
    wrt.push_back(i);
    xs.push_back(ins[static_cast<std::size_t>(i)]);
  }
  std::vector<Output> grads = gradients(*g, loss, xs);
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  RunOptions ro;
  ro.step = 3;  // a fixed step keeps random masks the same across the runs below
  std::vector<Tensor> analytic = s.run(feeds, grads, {}, ro);
  std::vector<Output> loss_fetch{loss};
  auto loss_at = [&](std::vector<Feed> f) { return static_cast<double>(s.run(f, loss_fetch, {}, ro)[0].item()); };

  const float eps = 1e-2f;
  for (std::size_t k = 0; k < wrt.size(); ++k) {
    const int i = wrt[k];
    CAPTURE(i);
    REQUIRE(analytic[k].shape() == inputs[static_cast<std::size_t>(i)].shape());
    const std::int64_t n = inputs[static_cast<std::size_t>(i)].num_elements();
    const std::int64_t stride = std::max<std::int64_t>(1, n / 40);  // at most ~40 elements per input
    for (std::int64_t e = 0; e < n; e += stride) {
      CAPTURE(e);
      std::vector<Feed> plus = feeds, minus = feeds;
      Tensor xp = inputs[static_cast<std::size_t>(i)].clone(), xm = inputs[static_cast<std::size_t>(i)].clone();
      xp.mutable_data<float>()[e] += eps;
      xm.mutable_data<float>()[e] -= eps;
      plus[static_cast<std::size_t>(i)].value = xp;
      minus[static_cast<std::size_t>(i)].value = xm;
      const double numeric = (loss_at(plus) - loss_at(minus)) / (2.0 * eps);
      const double got = analytic[k].data<float>()[e];
      CHECK(std::abs(got - numeric) <= check.tolerance * (1.0 + std::abs(numeric)));
    }
  }
}

// The STYLE.md shorthand: random float inputs of the given shapes.
inline void check_op(const std::string& op, const std::vector<Shape>& shapes, const OpCheck& check = {}) {
  std::vector<Tensor> inputs;
  for (std::size_t i = 0; i < shapes.size(); ++i) inputs.push_back(random_tensor(shapes[i], 1000 + i, check.gap));
  check_op_inputs(op, inputs, check);
}

// The gradients of weighted_sum(y) for every input, where y = build(graph, placeholders).
template <class Build>
std::vector<Tensor> input_gradients(const std::vector<Tensor>& inputs, Build build) {
  auto g = std::make_shared<Graph>();
  std::vector<Output> ins;
  std::vector<Feed> feeds;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(g->placeholder("in" + std::to_string(i), inputs[i].dtype(), inputs[i].shape()));
    feeds.push_back({ins.back(), inputs[i]});
  }
  const Output loss = weighted_sum(*g, build(*g, ins));
  const std::vector<Output> grads = gradients(*g, loss, ins);
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  return s.run(feeds, grads, {}, RunOptions{});
}

// A fused op (FusedMatMul, FusedConv2D) against its parts run one after another: `plain` on `inputs` with
// `attrs`, then BiasAdd with `bias`, then Relu or nothing. The fused op, on the inputs and the bias with
// the attrs and the activation, must give the same bits on 1 and 2 threads, and so must its gradients.
inline void check_fused_matches_parts(const std::string& fused, const std::string& plain,
                                      const std::vector<Tensor>& inputs, const Tensor& bias, const Attrs& attrs) {
  const Tensor biased = run_op("BiasAdd", {run_op(plain, inputs, attrs), bias}, {});
  std::vector<Tensor> fused_inputs = inputs;
  fused_inputs.push_back(bias);
  auto same_bits = [](const Tensor& got, const Tensor& expected) {
    REQUIRE(got.shape() == expected.shape());
    CHECK(std::memcmp(got.raw_data(), expected.raw_data(), expected.bytes()) == 0);
  };
  for (const std::string activation : {"relu", "linear"}) {
    CAPTURE(activation);
    Attrs fused_attrs = attrs;
    fused_attrs.set("activation", activation);
    for (int threads : {1, 2})
      same_bits(run_op(fused, fused_inputs, fused_attrs, threads),
                activation == "relu" ? run_op("Relu", {biased}, {}) : biased);
    const std::vector<Tensor> apart = input_gradients(fused_inputs, [&](Graph& g, const std::vector<Output>& in) {
      const Output z = g.add("BiasAdd", {g.add(plain, {in.begin(), in.end() - 1}, attrs), in.back()});
      return activation == "relu" ? g.add("Relu", {z}) : z;
    });
    const std::vector<Tensor> together = input_gradients(
        fused_inputs, [&](Graph& g, const std::vector<Output>& in) { return g.add(fused, in, fused_attrs); });
    REQUIRE(together.size() == apart.size());
    for (std::size_t i = 0; i < apart.size(); ++i) same_bits(together[i], apart[i]);
  }
}

}  // namespace tctl::testing
