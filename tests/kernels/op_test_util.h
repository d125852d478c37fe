// check_op: the shared harness for op tests. For one op and concrete inputs it checks that the shape the
// graph inferred matches what the kernel produced, that the gradient agrees with central finite
// differences, and that 1 and 2 intra-op threads give bit-identical outputs.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/autodiff.h"
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

inline OpGraph make_op_graph(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  OpGraph o;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    o.inputs.push_back(o.graph->placeholder("in" + std::to_string(i), inputs[i].dtype(), inputs[i].shape()));
    o.feeds.push_back({o.inputs.back(), inputs[i]});
  }
  o.y = o.graph->add(op, o.inputs, attrs);
  return o;
}

// Runs `op` on `inputs`; returns its output. `intra` sets the intra-op thread count; with more than one, the
// pool ignores the kernels' grains, so even small inputs are cut over the threads and a comparison with one
// thread compares a parallel run (else both would run on one thread below the split size).
inline Tensor run_op(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs, int intra = 1) {
  OpGraph o = make_op_graph(op, inputs, attrs);
  ThreadPool inter(1), pool(intra, /*ignore_grain=*/intra > 1);
  Session s(o.graph, inter, pool);
  std::vector<Output> fetch{o.y};
  RunOptions ro;
  ro.step = 3;
  Tensor out = s.run(o.feeds, fetch, {}, ro)[0];
  return out;
}

inline void check_op_inputs(const std::string& op, const std::vector<Tensor>& inputs, const OpCheck& check = {}) {
  CAPTURE(op);
  OpGraph o = make_op_graph(op, inputs, check.attrs);
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
  if (!check.check_gradient) return;

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
