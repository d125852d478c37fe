// The sequence ops one at a time (core/ops/sequence.cpp): values written out, gradients against finite
// differences, the same bits on any thread count, and in device mode (kernels_tests_cuda) each op on the GPU
// against the CPU. The layers built on them are tested in tests/models/nn/layers/.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.h"
#include "kernels/op_test_util.h"

using namespace tctl;
using tctl::testing::check_op;
using tctl::testing::check_op_inputs;
using tctl::testing::input_gradients;
using tctl::testing::OpCheck;
using tctl::testing::random_tensor;
using tctl::testing::run_op;
using tctl::testing::test_device;

namespace {

// Whole-number ids in [0, rows), some of them repeated, as a [batch, steps] float tensor.
Tensor ids_tensor(std::int64_t batch, std::int64_t steps, std::int64_t rows) {
  std::vector<float> ids(static_cast<std::size_t>(batch * steps));
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<float>((i * 7 + 3) % static_cast<std::size_t>(rows));
  return Tensor::from_floats(Shape{batch, steps}, ids);
}

const Tensor kMask = Tensor::from_floats(Shape{3, 4}, std::vector<float>{1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0});

}  // namespace

TEST_CASE("TokenMask is 1 where the id is not 0") {
  const Tensor ids = Tensor::from_floats(Shape{2, 3}, std::vector<float>{0, 4, 1, 2, 0, 0});
  CHECK(run_op("TokenMask", {ids}, {}).to_floats() == std::vector<float>{0, 1, 1, 1, 0, 0});
  check_op_inputs("TokenMask", {ids}, {.check_gradient = false});
}

TEST_CASE("Embedding reads the ids' rows, and its gradient adds dy into them") {
  const Tensor table = random_tensor(Shape{5, 3}, 11);
  const Tensor ids = ids_tensor(2, 4, 5);  // ids 3 0 2 4 1 3 0 2: rows 0, 2 and 3 read twice
  const std::vector<float> y = run_op("Embedding", {table, ids}, {}).to_floats();
  const std::vector<float> t = table.to_floats(), id = ids.to_floats();
  for (std::size_t i = 0; i < id.size(); ++i)
    for (std::size_t c = 0; c < 3; ++c) CHECK(y[i * 3 + c] == t[static_cast<std::size_t>(id[i]) * 3 + c]);
  check_op_inputs("Embedding", {table, ids}, {.constant_inputs = {1}});
  // A wide row (more columns than a warp has lanes) and a table with rows no id names.
  check_op_inputs("Embedding", {random_tensor(Shape{40, 37}, 12), ids_tensor(3, 5, 31)}, {.constant_inputs = {1}});
}

TEST_CASE("Embedding refuses an id that names no row, on the CPU and on the test device") {
  const Tensor table = random_tensor(Shape{4, 2}, 13);
  for (const float bad : {4.0f, -1.0f, 1.5f}) {
    const Tensor ids = Tensor::from_floats(Shape{1, 3}, std::vector<float>{1, bad, 2});
    CHECK_THROWS_AS(run_op("Embedding", {table, ids}, {}), RuntimeError);
    if (!test_device().empty()) CHECK_THROWS_AS(run_op("Embedding", {table, ids}, {}, 1, test_device()), RuntimeError);
  }
}

// Embedding then MatMul on the same inputs, the value and the gradients of table and W.
std::vector<Tensor> embedding_then_matmul(const Tensor& table, const Tensor& ids, const Tensor& w, bool fused) {
  std::vector<Tensor> out = input_gradients({table, w}, [&](Graph& g, const std::vector<Output>& in) {
    const Output id = g.constant(ids);
    return fused ? g.add("EmbeddingMatMul", {in[0], id, in[1]})
                 : g.add("MatMul", {g.add("Embedding", {in[0], id}), in[1]});
  });
  out.insert(out.begin(), fused ? run_op("EmbeddingMatMul", {table, ids, w}, {})
                                : run_op("MatMul", {run_op("Embedding", {table, ids}, {}), w}, {}));
  return out;
}

void check_close(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.shape() == expected.shape());
  const std::vector<float> a = got.to_floats(), b = expected.to_floats();
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(a[i] - b[i]) <= 1e-5f * (1.0f + std::abs(b[i])));
  }
}

TEST_CASE("EmbeddingMatMul is Embedding then MatMul, its products taken once per distinct id") {
  const Tensor table = random_tensor(Shape{40, 37}, 21);
  const Tensor w = random_tensor(Shape{37, 130}, 22);  // 130 columns: three blocks of the row sums on 2 threads
  // 54 ids of 31 values, 23 of them twice; and ids that are all one row, and all distinct.
  for (const Tensor& ids :
       {ids_tensor(6, 9, 31), Tensor::from_floats(Shape{2, 3}, std::vector<float>(6, 7.0f)), ids_tensor(1, 31, 31)}) {
    const std::vector<Tensor> fused = embedding_then_matmul(table, ids, w, true);
    const std::vector<Tensor> apart = embedding_then_matmul(table, ids, w, false);
    REQUIRE(fused.size() == 3);
    for (std::size_t i = 0; i < fused.size(); ++i) {
      CAPTURE(i);
      check_close(fused[i], apart[i]);
    }
  }
  // Finite differences, the shape inferred, and the same bits on 1 and 2 threads, the gradients' nodes too.
  const Tensor ids = ids_tensor(6, 9, 31);
  check_op_inputs("EmbeddingMatMul", {table, ids, w}, {.constant_inputs = {1}});
  const Tensor sums = run_op("EmbeddingRowSums", {random_tensor(Shape{6, 9, 130}, 25), ids, table}, {});
  const OpCheck no_gradient{.check_gradient = false};
  check_op_inputs("EmbeddingRowSums", {random_tensor(Shape{6, 9, 130}, 25), ids, table}, no_gradient);
  check_op_inputs("EmbeddingMatMulTableGrad", {sums, ids, w, table}, no_gradient);
  check_op_inputs("EmbeddingMatMulKernelGrad", {sums, ids, table}, no_gradient);
  // The sums past the 31 distinct ids are zero.
  const std::vector<float> tail = sums.to_floats();
  CHECK(std::all_of(tail.begin() + 31 * 130, tail.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("EmbeddingMatMul refuses an id that names no row, and the next step is right") {
  const Tensor table = random_tensor(Shape{4, 3}, 23);
  const Tensor w = random_tensor(Shape{3, 5}, 24);
  testing::OpGraph o = testing::make_op_graph(
      "EmbeddingMatMul", {table, Tensor::from_floats(Shape{1, 3}, std::vector<float>{1, 2, 1}), w}, {}, "cpu");
  ThreadPool inter(1), intra(1);
  Session s(o.graph, inter, intra);
  const std::vector<Output> fetch{o.y};
  std::vector<Feed> feeds = o.feeds;
  // Rows 1 and 2 come before the bad id: refused before any is marked as seen.
  feeds[1].value = Tensor::from_floats(Shape{1, 3}, std::vector<float>{1, 2, 4});
  CHECK_THROWS_AS(s.run(feeds, fetch, {}, RunOptions{}), RuntimeError);
  feeds[1].value = Tensor::from_floats(Shape{1, 3}, std::vector<float>{2, 3, 2});
  const Tensor got = s.run(feeds, fetch, {}, RunOptions{})[0];
  check_close(got, run_op("MatMul", {run_op("Embedding", {table, feeds[1].value}, {}), w}, {}));
}

TEST_CASE("PositionEmbedding adds the table's first rows at every example, and sums dy over the batch") {
  check_op("PositionEmbedding", {{3, 4, 5}, {6, 5}});
  const Tensor x = Tensor::from_floats(Shape{2, 2, 1}, std::vector<float>{1, 2, 3, 4});
  const Tensor table = Tensor::from_floats(Shape{3, 1}, std::vector<float>{10, 20, 30});
  CHECK(run_op("PositionEmbedding", {x, table}, {}).to_floats() == std::vector<float>{11, 22, 13, 24});
}

TEST_CASE("LayerNorm normalizes each row, its gradients check against finite differences") {
  const Attrs attrs{{"epsilon", 1e-3}};
  check_op("LayerNorm", {{3, 4, 6}, {6}, {6}}, {.attrs = attrs});
  // Rows wider than a warp.
  check_op("LayerNorm", {{2, 45}, {45}, {45}}, {.attrs = attrs});
  const Tensor x = Tensor::from_floats(Shape{1, 4}, std::vector<float>{1, 2, 3, 6});
  const Tensor ones = Tensor::filled(Shape{4}, 1.0f), zeros = Tensor::filled(Shape{4}, 0.0f);
  // Mean 3, variance 3.5: (x - 3) / sqrt(3.5 + 1e-3).
  const std::vector<float> y = run_op("LayerNorm", {x, ones, zeros}, attrs).to_floats();
  const std::vector<float> want{-2.0f, -1.0f, 0.0f, 3.0f};
  for (std::size_t i = 0; i < 4; ++i) CHECK(y[i] == doctest::Approx(want[i] / std::sqrt(3.501)).epsilon(1e-6));
}

TEST_CASE("GlobalAvgPool and GlobalMaxPool pool over the steps a mask keeps") {
  for (const char* op : {"GlobalAvgPool", "GlobalMaxPool"}) {
    CAPTURE(op);
    const Tensor x = random_tensor(Shape{3, 4, 5}, 17, 0.05f);
    check_op_inputs(op, {x});
    check_op_inputs(op, {x, kMask}, {.constant_inputs = {1}});
  }
  // Example 1 keeps no step: zeros.
  const Tensor x = Tensor::from_floats(Shape{3, 4, 1}, std::vector<float>{1, 2, 9, 3, 5, 6, 7, 8, -1, -4, -2, 7});
  CHECK(run_op("GlobalAvgPool", {x, kMask}, {}).to_floats() == std::vector<float>{2, 0, -3});
  CHECK(run_op("GlobalMaxPool", {x, kMask}, {}).to_floats() == std::vector<float>{3, 0, -2});
}
