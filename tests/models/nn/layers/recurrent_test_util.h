// Keras' recurrent cells written out in double precision, step by step, from the equations in Keras'
// documentation (LSTM gates i, f, c, o; GRU z, r, h with reset_after), and the check that holds a
// recurrent layer's outputs against them.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "models/nn/layers/layer_test_util.h"

namespace tctl::testing {

struct RecurrentWeights {
  std::vector<float> kernel, recurrent, bias;  // [F, G H], [H, G H], [G H] or the GRU's [2, 3 H]
};

// The outputs of `cell` ("lstm", "gru", "tanh", "relu") over x [batch, steps, features]: every step's h
// [batch, steps, units], in the order the cell ran them (last input first when backwards).
inline std::vector<double> reference_recurrent(const std::string& cell, const std::vector<float>& x, std::int64_t batch,
                                               std::int64_t steps, std::int64_t features, std::int64_t units,
                                               const RecurrentWeights& w, bool backwards) {
  const std::int64_t gates = cell == "lstm" ? 4 : cell == "gru" ? 3 : 1, cols = gates * units;
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  std::vector<double> out(static_cast<std::size_t>(batch * steps * units));
  for (std::int64_t n = 0; n < batch; ++n) {
    std::vector<double> h(static_cast<std::size_t>(units), 0.0), c = h;
    for (std::int64_t k = 0; k < steps; ++k) {
      const std::int64_t t = backwards ? steps - 1 - k : k;
      std::vector<double> xz(static_cast<std::size_t>(cols), 0.0), hz = xz;
      for (std::int64_t j = 0; j < cols; ++j) {
        for (std::int64_t f = 0; f < features; ++f)
          xz[j] += x[(n * steps + t) * features + f] * double{w.kernel[f * cols + j]};
        for (std::int64_t u = 0; u < units; ++u) hz[j] += h[u] * double{w.recurrent[u * cols + j]};
        xz[j] += w.bias[j];
        if (cell == "gru") hz[j] += w.bias[cols + j];
      }
      std::vector<double> next(static_cast<std::size_t>(units));
      for (std::int64_t u = 0; u < units; ++u) {
        if (cell == "lstm") {
          const double i = sigmoid(xz[u] + hz[u]), f = sigmoid(xz[units + u] + hz[units + u]);
          const double g = std::tanh(xz[2 * units + u] + hz[2 * units + u]);
          const double o = sigmoid(xz[3 * units + u] + hz[3 * units + u]);
          c[u] = f * c[u] + i * g;
          next[u] = o * std::tanh(c[u]);
        } else if (cell == "gru") {
          const double z = sigmoid(xz[u] + hz[u]), r = sigmoid(xz[units + u] + hz[units + u]);
          const double hh = std::tanh(xz[2 * units + u] + r * hz[2 * units + u]);
          next[u] = z * h[u] + (1.0 - z) * hh;
        } else {
          const double v = xz[u] + hz[u];
          next[u] = cell == "tanh" ? std::tanh(v) : std::max(v, 0.0);
        }
      }
      h = next;
      for (std::int64_t u = 0; u < units; ++u) out[(n * steps + k) * units + u] = h[u];
    }
  }
  return out;
}

// Builds `type` (cell `cell`, `extra` more keys) with random weights and bias, runs it on a random batch with
// every output returned, forwards and backwards, and compares each step with reference_recurrent within
// 1e-5 of max(1, |h|).
inline void check_recurrent_reference(const std::string& type, const std::string& cell, const std::string& extra = "") {
  const std::int64_t batch = 19, steps = 6, features = 5, units = 7;  // 19: a block of 16 and one of 3
  for (const bool backwards : {false, true}) {
    CAPTURE(backwards);
    const std::string json = "{\"type\":\"" + type + "\",\"units\":7,\"return_sequences\":true,\"go_backwards\":" +
                             (backwards ? "true" : "false") + extra + "}";
    auto net = build_one_layer(json, Shape{steps, features});
    const auto& vars = net->layers().front()->variables();
    REQUIRE(vars.size() == 3);
    RecurrentWeights w;
    std::vector<float>* parts[] = {&w.kernel, &w.recurrent, &w.bias};
    for (std::size_t i = 0; i < 3; ++i) {
      const Tensor v = random_tensor(vars[i]->read().shape(), 100 + i, -0.6f, 0.6f);
      vars[i]->assign(v);
      *parts[i] = v.to_floats();
    }
    const Tensor x = random_tensor(Shape{batch, steps, features}, 5, -2.0f, 2.0f);
    const std::vector<double> want =
        reference_recurrent(cell, x.to_floats(), batch, steps, features, units, w, backwards);
    for (const int threads : {1, 3}) {
      const std::vector<float> got = run_net(*net, x, false, threads).to_floats();
      REQUIRE(got.size() == want.size());
      double worst = 0.0;
      for (std::size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
      CAPTURE(threads);
      CHECK(worst <= 1e-5);
    }
  }
}

}  // namespace tctl::testing
