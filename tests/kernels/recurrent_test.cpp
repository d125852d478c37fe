// The recurrent ops as a layer chains them (Recurrence, RecurrenceOutput, and back RecurrenceOutputGrad,
// RecurrenceGrad, RecurrenceParamGrad): the outputs and the gradients of xp, U and b give the same bits on 1
// and 2 intra-op threads, and in device mode (kernels_tests_cuda) match the CPU's within 1e-4, for every
// cell, with a mask, backwards, and with recurrent dropout. Finite differences of the same gradients are the
// layer tests' (tests/models/nn/layers/).
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/recurrent.h"
#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::random_tensor;
using tctl::testing::test_device;
using tctl::testing::weighted_sum;

namespace {

struct Chain {
  std::string cell;
  bool masked = false, backwards = false, sequences = false;
  double recurrent_dropout = 0.0;
};

constexpr std::int64_t kBatch = 5, kSteps = 4, kUnits = 3;

// The chain's output, then the gradients of weighted_sum(output) for xp, U and b, run on `device`.
std::vector<Tensor> run_chain(const Chain& c, const std::string& device, int threads) {
  const RecurrentCell cell = recurrent_cell(Attrs{{"cell", c.cell}});
  const std::int64_t columns = recurrent_gates(cell) * kUnits;
  const std::vector<Tensor> inputs{
      random_tensor(Shape{kBatch, kSteps, columns}, 31), random_tensor(Shape{kUnits, columns}, 32),
      random_tensor(recurrent_bias_shape(cell, columns), 33),
      Tensor::from_floats(Shape{kBatch, kSteps},
                          std::vector<float>{1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0})};
  auto g = std::make_shared<Graph>();
  Graph::Scope scope(*g, "", device, Phase::kForward);
  std::vector<Output> ins;
  std::vector<Feed> feeds;
  for (std::size_t i = 0; i < (c.masked ? 4u : 3u); ++i) {
    ins.push_back(g->placeholder("in" + std::to_string(i), DType::kF32, inputs[i].shape()));
    feeds.push_back({ins.back(), inputs[i]});
  }
  Attrs attrs{{"cell", c.cell}, {"go_backwards", std::int64_t{c.backwards}}};
  if (c.recurrent_dropout > 0.0) {
    attrs.set("recurrent_dropout", c.recurrent_dropout);
    attrs.set("stream", std::int64_t{12});
  }
  const Output ws = g->add("Recurrence", ins, attrs);
  std::vector<Output> out_inputs{ws};
  if (c.masked) out_inputs.push_back(ins[3]);  // zero_output_for_mask, the last output's too
  const Output y = g->add("RecurrenceOutput", out_inputs,
                          Attrs{{"return_sequences", std::int64_t{c.sequences}},
                                {"reverse", std::int64_t{0}},
                                {"go_backwards", std::int64_t{c.backwards}}});
  const std::vector<Output> wrt{ins[0], ins[1], ins[2]};
  std::vector<Output> fetches{y};
  for (const Output d : gradients(*g, weighted_sum(*g, y), wrt)) fetches.push_back(d);
  ThreadPool inter(1), intra(threads, /*ignore_grain=*/threads > 1);
  SessionOptions options;
  options.placement.strict = true;
  Session s(g, inter, intra, options);
  RunOptions ro;
  ro.step = 3;
  return s.run(feeds, fetches, {}, ro);
}

std::vector<Chain> chains() {
  std::vector<Chain> out;
  for (const char* cell : {"lstm", "gru", "simple_tanh", "simple_relu"}) {
    out.push_back({cell});
    out.push_back({cell, true, true, true});
    out.push_back({cell, true, false, false, 0.4});
    out.push_back({cell, true, true, false});
  }
  return out;
}

}  // namespace

TEST_CASE("the recurrent ops give the same bits on any thread count, and the GPU the CPU's values") {
  for (const Chain& c : chains()) {
    CAPTURE(c.cell);
    CAPTURE(c.masked);
    CAPTURE(c.backwards);
    CAPTURE(c.recurrent_dropout);
    const std::vector<Tensor> one = run_chain(c, "cpu", 1), two = run_chain(c, "cpu", 2);
    REQUIRE(one.size() == 4);
    for (std::size_t k = 0; k < one.size(); ++k) CHECK(one[k].to_floats() == two[k].to_floats());
    // Each gradient holds something: a chain that dropped a term would show zeros here.
    for (std::size_t k = 1; k < one.size(); ++k) {
      double norm = 0.0;
      for (float v : one[k].to_floats()) norm += std::abs(v);
      CHECK(norm > 0.0);
    }
    if (test_device().empty()) continue;
    const std::vector<Tensor> device = run_chain(c, test_device(), 1);
    for (std::size_t k = 0; k < one.size(); ++k) {
      CAPTURE(k);
      const std::vector<float> want = one[k].to_floats(), got = device[k].to_floats();
      REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        CHECK(std::abs(got[i] - want[i]) <= 1e-4 * (1.0 + std::abs(want[i])));
    }
  }
}

// The workspace's gradient is its plane 0 alone: the LSTM's other five planes would be zeros nothing reads,
// 33 MB a step in bench_workloads lstm_text_b64.
TEST_CASE("the workspace's gradient holds plane 0 only") {
  auto g = std::make_shared<Graph>();
  Graph::Scope scope(*g, "", "cpu", Phase::kForward);
  const Output xp = g->placeholder("xp", DType::kF32, Shape{kBatch, kSteps, 4 * kUnits});
  const Output u = g->placeholder("u", DType::kF32, Shape{kUnits, 4 * kUnits});
  const Output b = g->placeholder("b", DType::kF32, Shape{4 * kUnits});
  const Output ws = g->add("Recurrence", {xp, u, b}, Attrs{{"cell", "lstm"}, {"go_backwards", std::int64_t{0}}});
  const Output y = g->add(
      "RecurrenceOutput", {ws},
      Attrs{{"return_sequences", std::int64_t{0}}, {"reverse", std::int64_t{0}}, {"go_backwards", std::int64_t{0}}});
  CHECK(g->spec(ws).shape == Shape{6, kBatch, kSteps, kUnits});
  const Output dws = g->add("RecurrenceOutputGrad", {y, ws}, Attrs{{"return_sequences", std::int64_t{0}}});
  CHECK(g->spec(dws).shape == Shape{1, kBatch, kSteps, kUnits});
  // RecurrenceGrad takes that plane, and refuses a gradient of another shape.
  CHECK(g->spec(g->add("RecurrenceGrad", {dws, ws, u}, Attrs{{"cell", "lstm"}})).shape ==
        Shape{kBatch, kSteps, 4 * kUnits});
  CHECK_THROWS(g->add("RecurrenceGrad", {ws, ws, u}, Attrs{{"cell", "lstm"}}));
}
