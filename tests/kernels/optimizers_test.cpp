#include <cmath>
#include <limits>

#include "kernels/op_test_util.h"

using namespace tctl;

namespace {
// Runs one update op on `var` with gradient g and learning rate lr (and extra variables as slots; Adam's
// step counter as an extra input), on `intra` intra-op threads. In device mode (TCTL_TEST_DEVICE) the
// update and its inputs run on the test device when it has a kernel for the op, the variables moved there.
void run_update(const std::string& op, float lr, const Attrs& attrs, std::vector<VarUse> vars, const Tensor& grad,
                std::vector<Output> extra_inputs_builder(Graph&) = nullptr, int intra = 1, bool on_test_device = true) {
  auto g = std::make_shared<Graph>();
  Graph::Scope scope(*g, "", on_test_device && testing::runs_on_test_device(op) ? testing::test_device() : "cpu",
                     Phase::kUpdate);
  std::vector<Output> ins{g->constant(grad), g->scalar(lr)};
  if (extra_inputs_builder) {
    auto more = extra_inputs_builder(*g);
    ins.insert(ins.end(), more.begin(), more.end());
  }
  Output u = g->add(op, ins, attrs, std::move(vars));
  ThreadPool inter_pool(1), intra_pool(intra, /*ignore_grain=*/intra > 1);
  Session s(g, inter_pool, intra_pool);
  std::vector<Output> targets{u};
  s.run({}, {}, targets);
}

std::vector<Output> step_zero(Graph& g) { return {g.scalar(0.0f)}; }

// Each update op with every option it has switched on, and how many slot variables it takes.
struct UpdateCase {
  std::string op;
  Attrs attrs;
  int slots;
  bool adam;  // takes the step count
};
const std::vector<UpdateCase>& update_cases() {
  static const std::vector<UpdateCase> cases{
      {"ApplySgd", {}, 0, false},
      {"ApplyMomentum", {{"momentum", 0.9}, {"nesterov", std::int64_t{1}}}, 1, false},
      {"ApplyAdam", {{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-7}, {"weight_decay", 0.1}}, 2, true},
      {"ApplyRmsProp", {{"rho", 0.9}, {"momentum", 0.5}, {"epsilon", 1e-7}, {"centered", std::int64_t{1}}}, 3, false},
      {"ApplyAdagrad", {{"epsilon", 1e-7}}, 1, false},
  };
  return cases;
}
}  // namespace

TEST_CASE("ApplySgd and ApplyMomentum follow Keras' formulas") {
  auto w = std::make_shared<Variable>("w", Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, 2.0f}));
  Tensor grad = Tensor::from_floats(Shape{2}, std::vector<float>{0.5f, -1.0f});
  run_update("ApplySgd", 0.1f, {}, {{w, true}}, grad);
  CHECK(w->read().to_floats() == std::vector<float>{0.95f, 2.1f});

  auto v = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{2}));
  Attrs m{{"momentum", 0.9}};
  run_update("ApplyMomentum", 0.1f, m, {{w, true}, {v, true}}, grad);
  run_update("ApplyMomentum", 0.1f, m, {{w, true}, {v, true}}, grad);
  // v1 = -0.05, w = 0.90; v2 = 0.9 * -0.05 - 0.05 = -0.095, w = 0.805
  CHECK(w->read().to_floats()[0] == doctest::Approx(0.805));
}

TEST_CASE("ApplyAdam's first step moves each weight by about the learning rate") {
  auto w = std::make_shared<Variable>("w", Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, 1.0f}));
  auto m = std::make_shared<Variable>("m", Tensor::zeros(DType::kF32, Shape{2}));
  auto v = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{2}));
  Attrs a{{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-7}};
  run_update("ApplyAdam", 0.01f, a, {{w, true}, {m, true}, {v, true}},
             Tensor::from_floats(Shape{2}, std::vector<float>{0.3f, -4.0f}), step_zero);
  auto r = w->read().to_floats();
  CHECK(r[0] == doctest::Approx(0.99).epsilon(1e-4));
  CHECK(r[1] == doctest::Approx(1.01).epsilon(1e-4));
  CHECK(m->read().to_floats()[0] == doctest::Approx(0.03));
}

TEST_CASE("each update gives the CPU's values on the test device, within its stated tolerance") {
  // Sizes either side of what a GPU updates in one block that checks its gradient itself (4,096), and one
  // past what its capped grid covers with an element a thread (528 blocks of 256 on an H100).
  for (const UpdateCase& c : update_cases())
    for (const Shape shape : {Shape{4096}, Shape{4097}, Shape{300000}}) {
      CAPTURE(c.op);
      CAPTURE(shape.num_elements());
      // The same variables twice: updated on the CPU, and on the test device (the CPU again outside device mode).
      std::vector<std::vector<std::shared_ptr<Variable>>> runs(2);
      for (int run = 0; run < 2; ++run) {
        std::vector<VarUse> uses;
        for (int k = 0; k <= c.slots; ++k) {
          // The weights random, the slots zero as an optimizer makes them (then three steps fill them).
          const Tensor initial = k == 0 ? testing::random_tensor(shape, 10) : Tensor::zeros(DType::kF32, shape);
          runs[run].push_back(std::make_shared<Variable>("v" + std::to_string(k), initial));
          uses.push_back({runs[run].back(), true});
        }
        for (int step = 0; step < 3; ++step)
          run_update(c.op, 0.01f, c.attrs, uses, testing::random_tensor(shape, 100 + step),
                     c.adam ? &step_zero : nullptr, 1, /*on_test_device=*/run == 1);
      }
      const double t = testing::device_tolerance(c.op);
      for (int k = 0; k <= c.slots; ++k) {
        const std::vector<float> cpu = runs[0][k]->read().to_floats(), dev = runs[1][k]->read().to_floats();
        for (std::size_t i = 0; i < cpu.size(); ++i)
          CHECK(std::abs(static_cast<double>(dev[i]) - cpu[i]) <= t * (1.0 + std::abs(static_cast<double>(cpu[i]))));
      }
    }
}

TEST_CASE("every update gives the mutex mode's bits in every other locking mode") {
  // One thread, so no mode can lose an update: the lock-free paths (none, atomic, dataflow) apply the same
  // formulas as the locked ones, AdamW's decay and Nesterov's look-ahead included.
  for (const UpdateCase& c : update_cases()) {
    std::vector<float> mutex_weights;
    for (const LockingMode mode : {LockingMode::kMutex, LockingMode::kNone, LockingMode::kAtomic,
                                   LockingMode::kDataflow, LockingMode::kSnapshot, LockingMode::kProcess}) {
      CAPTURE(c.op);
      CAPTURE(locking_mode_name(mode));
      std::vector<VarUse> uses;
      for (int k = 0; k <= c.slots; ++k) {
        const Tensor initial = k == 0 ? testing::random_tensor(Shape{64}, 10) : Tensor::zeros(DType::kF32, Shape{64});
        uses.push_back({std::make_shared<Variable>("v" + std::to_string(k), initial, mode), true});
      }
      for (int step = 0; step < 3; ++step)
        run_update(c.op, 0.01f, c.attrs, uses, testing::random_tensor(Shape{64}, 100 + step),
                   c.adam ? &step_zero : nullptr);
      const std::vector<float> w = uses[0].var->read().to(cpu_device()).to_floats();
      if (mode == LockingMode::kMutex)
        mutex_weights = w;
      else
        CHECK(w == mutex_weights);
    }
  }
}

TEST_CASE("an update never changes a snapshot read before it") {
  auto w = std::make_shared<Variable>("w", Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, 2.0f}));
  Tensor before = w->read();
  run_update("ApplySgd", 1.0f, {}, {{w, true}}, Tensor::from_floats(Shape{2}, std::vector<float>{1.0f, 1.0f}));
  CHECK(before.to_floats() == std::vector<float>{1.0f, 2.0f});
  CHECK(w->read().to_floats() == std::vector<float>{0.0f, 1.0f});
}

TEST_CASE("every update refuses a NaN or infinite gradient before writing anything") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Sizes as in the test above. Past 4 elements a bad one of the other kind comes later, 256 elements on:
  // the same thread of a one-block update, which must keep its first.
  for (const std::int64_t n : {std::int64_t{4}, std::int64_t{4096}, std::int64_t{4097}, std::int64_t{300000}}) {
    for (const LockingMode mode : {LockingMode::kMutex, LockingMode::kNone, LockingMode::kSnapshot}) {
      for (const UpdateCase& c : update_cases()) {
        for (const float bad : {nan, inf, -inf}) {
          CAPTURE(n);
          CAPTURE(c.op);
          CAPTURE(locking_mode_name(mode));
          CAPTURE(bad);
          const auto size = static_cast<std::size_t>(n);
          std::vector<float> w0(size), g(size);
          for (std::size_t i = 0; i < size; ++i) {
            w0[i] = static_cast<float>(i + 1);
            g[i] = 0.1f * static_cast<float>(i % 7 + 1);
          }
          g[size / 2] = bad;
          if (n > 4) g[size / 2 + 256] = std::isnan(bad) ? inf : nan;
          auto w = std::make_shared<Variable>("dense/kernel", Tensor::from_floats(Shape{n}, w0), mode);
          std::vector<VarUse> uses{{w, true}};
          std::vector<std::shared_ptr<Variable>> slots;
          for (int k = 0; k < c.slots; ++k) {
            slots.push_back(
                std::make_shared<Variable>("slot" + std::to_string(k), Tensor::filled(Shape{n}, 0.5f), mode));
            uses.push_back({slots.back(), true});
          }
          try {
            run_update(c.op, 0.1f, c.attrs, uses, Tensor::from_floats(Shape{n}, g), c.adam ? &step_zero : nullptr);
            FAIL("expected a NonFiniteError");
          } catch (const NonFiniteError& e) {
            CHECK(std::string(e.what()) == "gradient of dense/kernel is " +
                                               std::string(std::isnan(bad) ? "NaN" : "infinite") + " (element " +
                                               std::to_string(n / 2) + " of " + std::to_string(n) + ")");
          }
          CHECK(w->read().to_floats() == w0);
          for (const auto& s : slots) CHECK(s->read().to_floats() == std::vector<float>(size, 0.5f));
        }
      }
    }
  }
}

TEST_CASE("a gradient checked in blocks on two threads still names its first bad element and writes nothing") {
  // 70,000 elements cut into two blocks of the check, one per thread; both bad elements sit in the second.
  const std::int64_t n = 70000;
  std::vector<float> grad(static_cast<std::size_t>(n), 0.25f);
  grad[69000] = std::numeric_limits<float>::quiet_NaN();
  grad[40000] = -std::numeric_limits<float>::infinity();
  auto w = std::make_shared<Variable>("dense/kernel", Tensor::filled(Shape{n}, 1.0f));
  auto m = std::make_shared<Variable>("m", Tensor::zeros(DType::kF32, Shape{n}));
  auto v = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{n}));
  try {
    run_update("ApplyAdam", 0.1f, Attrs{{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-7}},
               {{w, true}, {m, true}, {v, true}}, Tensor::from_floats(Shape{n}, grad), step_zero, 2);
    FAIL("expected a NonFiniteError");
  } catch (const NonFiniteError& e) {
    CHECK(std::string(e.what()) == "gradient of dense/kernel is infinite (element 40000 of 70000)");
  }
  CHECK(w->read().to_floats() == std::vector<float>(static_cast<std::size_t>(n), 1.0f));
  CHECK(m->read().to_floats() == std::vector<float>(static_cast<std::size_t>(n), 0.0f));

  // Finite again, the same update on one and on two threads gives the same bits.
  grad[69000] = grad[40000] = -0.5f;
  std::vector<std::vector<float>> results;
  for (const int intra : {1, 2}) {
    auto w2 = std::make_shared<Variable>("w", Tensor::filled(Shape{n}, 1.0f));
    auto m2 = std::make_shared<Variable>("m", Tensor::zeros(DType::kF32, Shape{n}));
    auto v2 = std::make_shared<Variable>("v", Tensor::zeros(DType::kF32, Shape{n}));
    run_update("ApplyAdam", 0.1f, Attrs{{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-7}},
               {{w2, true}, {m2, true}, {v2, true}}, Tensor::from_floats(Shape{n}, grad), step_zero, intra);
    results.push_back(w2->read().to_floats());
  }
  CHECK(results[0] == results[1]);
  CHECK(results[0][40000] > 1.0f);
}

TEST_CASE("GlobalNorm and ClipByGlobalNorm scale gradients of a known norm exactly") {
  // Two gradients with global norm sqrt(9 + 16 + 144) = 13.
  const Tensor a = Tensor::from_floats(Shape{2}, std::vector<float>{3.0f, 4.0f});
  const Tensor b = Tensor::from_floats(Shape{1, 1}, std::vector<float>{12.0f});
  CHECK(testing::run_op("GlobalNorm", {a, b}, {}).item() == 13.0f);
  const Tensor norm = Tensor::scalar(13.0f);
  const Tensor clipped = testing::run_op("ClipByGlobalNorm", {a, norm}, Attrs{{"clipnorm", 6.5}});
  CHECK(clipped.to_floats() == std::vector<float>{1.5f, 2.0f});
  // Under the limit, and at it, the gradient passes unchanged.
  CHECK(testing::run_op("ClipByGlobalNorm", {a, norm}, Attrs{{"clipnorm", 13.0}}).to_floats() == a.to_floats());
  CHECK(testing::run_op("ClipByGlobalNorm", {a, norm}, Attrs{{"clipnorm", 100.0}}).to_floats() == a.to_floats());
  // A non-finite norm leaves the gradient for the update's guard to report.
  const Tensor inf_norm = Tensor::scalar(std::numeric_limits<float>::infinity());
  CHECK(testing::run_op("ClipByGlobalNorm", {a, inf_norm}, Attrs{{"clipnorm", 1.0}}).to_floats() == a.to_floats());
}

namespace {
std::vector<Output> keep_sum(Graph& g) { return {g.scalar(1.0f)}; }
std::vector<Output> start_sum(Graph& g) { return {g.scalar(0.0f)}; }
}  // namespace

TEST_CASE("AccumulateGradient starts and adds to a sum; MovingAverage follows Keras' use_ema") {
  auto sum = std::make_shared<Variable>("sum", Tensor::from_floats(Shape{2}, std::vector<float>{7.0f, 7.0f}));
  // keep 0: the sum starts at share * g, whatever it held.
  run_update("AccumulateGradient", 0.25f, {}, {{sum, true}}, Tensor::from_floats(Shape{2}, std::vector<float>{4, -8}),
             start_sum);
  CHECK(sum->read().to_floats() == std::vector<float>{1.0f, -2.0f});
  run_update("AccumulateGradient", 0.5f, {}, {{sum, true}}, Tensor::from_floats(Shape{2}, std::vector<float>{2, 2}),
             keep_sum);
  CHECK(sum->read().to_floats() == std::vector<float>{2.0f, -1.0f});
  // A gradient that is not finite is refused before anything is written.
  CHECK_THROWS_AS(run_update("AccumulateGradient", 0.5f, {}, {{sum, true}},
                             Tensor::from_floats(Shape{2}, std::vector<float>{1, std::nanf("")}), keep_sum),
                  NonFiniteError);
  CHECK(sum->read().to_floats() == std::vector<float>{2.0f, -1.0f});

  // MovingAverage(value, steps done): the first update (0 steps done) starts the average at the value.
  auto average = std::make_shared<Variable>("avg", Tensor::zeros(DType::kF32, Shape{2}));
  const Attrs momentum{{"momentum", 0.75}};
  run_update("MovingAverage", 0.0f, momentum, {{average, true}},
             Tensor::from_floats(Shape{2}, std::vector<float>{4, 8}));
  CHECK(average->read().to_floats() == std::vector<float>{4.0f, 8.0f});
  run_update("MovingAverage", 1.0f, momentum, {{average, true}},
             Tensor::from_floats(Shape{2}, std::vector<float>{0, 16}));
  CHECK(average->read().to_floats() == std::vector<float>{3.0f, 10.0f});
}

TEST_CASE("AccumulateGradient and MovingAverage give the CPU's bits on the test device") {
  for (const Shape shape : {Shape{4096}, Shape{300000}}) {
    CAPTURE(shape.num_elements());
    std::vector<std::shared_ptr<Variable>> sums, averages;
    for (int run = 0; run < 2; ++run) {
      sums.push_back(std::make_shared<Variable>("sum", testing::random_tensor(shape, 3)));
      averages.push_back(std::make_shared<Variable>("avg", Tensor::zeros(DType::kF32, shape)));
      for (int step = 0; step < 3; ++step) {
        run_update("AccumulateGradient", 0.3f, {}, {{sums[run], true}}, testing::random_tensor(shape, 20 + step),
                   step == 0 ? start_sum : keep_sum, 1, /*on_test_device=*/run == 1);
        run_update("MovingAverage", static_cast<float>(step), {{"momentum", 0.9}}, {{averages[run], true}},
                   testing::random_tensor(shape, 40 + step), nullptr, 1, /*on_test_device=*/run == 1);
      }
    }
    CHECK(sums[0]->read().to(cpu_device()).to_floats() == sums[1]->read().to(cpu_device()).to_floats());
    CHECK(averages[0]->read().to(cpu_device()).to_floats() == averages[1]->read().to(cpu_device()).to_floats());
  }
}

namespace {

// Three variables of three sizes (a bias, a kernel, one past a GPU's one-block update) and their slots, as an
// optimizer makes them: the weights random, the slots zero.
std::vector<std::vector<std::shared_ptr<Variable>>> fused_case_variables(const UpdateCase& c) {
  std::vector<std::vector<std::shared_ptr<Variable>>> vars;
  for (const std::int64_t n : {std::int64_t{10}, std::int64_t{640}, std::int64_t{5000}}) {
    vars.emplace_back();
    for (int k = 0; k <= c.slots; ++k)
      vars.back().push_back(
          std::make_shared<Variable>("w" + std::to_string(n) + "/" + std::to_string(k),
                                     k == 0 ? testing::random_tensor(Shape{n}, static_cast<std::uint64_t>(n))
                                            : Tensor::zeros(DType::kF32, Shape{n})));
  }
  return vars;
}

// One FusedUpdate of `c` over `vars` with the gradients, on the test device when it has the kernel.
void run_fused(const UpdateCase& c, const std::vector<std::vector<std::shared_ptr<Variable>>>& vars,
               const std::vector<Tensor>& grads) {
  auto g = std::make_shared<Graph>();
  Graph::Scope scope(*g, "", testing::runs_on_test_device("FusedUpdate") ? testing::test_device() : "cpu",
                     Phase::kUpdate);
  std::vector<Output> ins;
  std::vector<VarUse> uses;
  for (std::size_t i = 0; i < vars.size(); ++i) {
    ins.push_back(g->constant(grads[i]));
    for (const auto& v : vars[i]) uses.push_back({v, true});
  }
  ins.push_back(g->scalar(0.01f));
  if (c.adam) ins.push_back(g->scalar(0.0f));
  Attrs a = c.attrs;
  a.set("update", c.op);
  a.set("variables", static_cast<std::int64_t>(vars.size()));
  const Output u = g->add("FusedUpdate", ins, a, std::move(uses));
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  s.run({}, {}, std::vector<Output>{u});
}

}  // namespace

TEST_CASE("FusedUpdate gives each variable the bits of its own update, for every optimizer") {
  for (const UpdateCase& c : update_cases()) {
    CAPTURE(c.op);
    const auto apart = fused_case_variables(c), fused = fused_case_variables(c);
    for (int step = 0; step < 3; ++step) {
      std::vector<Tensor> grads;
      for (std::size_t i = 0; i < apart.size(); ++i) {
        grads.push_back(testing::random_tensor(apart[i][0]->shape(), static_cast<std::uint64_t>(100 * step + i)));
        std::vector<VarUse> uses;
        for (const auto& v : apart[i]) uses.push_back({v, true});
        run_update(c.op, 0.01f, c.attrs, uses, grads.back(), c.adam ? &step_zero : nullptr, 1, false);
      }
      run_fused(c, fused, grads);
    }
    for (std::size_t i = 0; i < apart.size(); ++i)
      for (std::size_t k = 0; k < apart[i].size(); ++k) {
        CAPTURE(apart[i][k]->name());
        const std::vector<float> want = apart[i][k]->read().to_floats();
        const std::vector<float> got = fused[i][k]->read().to(cpu_device()).to_floats();
        const double t = testing::device_tolerance("FusedUpdate");
        REQUIRE(got.size() == want.size());
        for (std::size_t e = 0; e < want.size(); ++e)
          CHECK(std::abs(static_cast<double>(got[e]) - want[e]) <= t * (1.0 + std::abs(static_cast<double>(want[e]))));
      }
  }
}

TEST_CASE("FusedUpdate refuses a gradient that is not finite before writing any of its variables") {
  for (const UpdateCase& c : update_cases()) {
    CAPTURE(c.op);
    const auto vars = fused_case_variables(c);
    std::vector<std::vector<float>> before;
    std::vector<Tensor> grads;
    for (const auto& var : vars) {
      before.push_back(var[0]->read().to_floats());
      grads.push_back(testing::random_tensor(var[0]->shape(), 7));
    }
    // The last variable's gradient is bad: the first two, whose checks pass, must not be written either.
    std::vector<float> bad = grads[2].to_floats();
    bad[4321] = std::numeric_limits<float>::quiet_NaN();
    grads[2] = Tensor::from_floats(Shape{5000}, bad);
    CHECK_THROWS_WITH_AS(run_fused(c, vars, grads), "gradient of w5000/0 is NaN (element 4321 of 5000)",
                         NonFiniteError);
    for (std::size_t i = 0; i < vars.size(); ++i) CHECK(vars[i][0]->read().to(cpu_device()).to_floats() == before[i]);
  }
}

TEST_CASE("FusedUpdate checks its update and its inputs where the graph is built") {
  Graph g;
  const Output grad = g.constant(Tensor::filled(Shape{3}, 1.0f));
  auto refused = [&](std::vector<Output> ins, Attrs a) {
    CHECK_THROWS_AS(g.add("FusedUpdate", std::move(ins), std::move(a)), ShapeError);
  };
  refused({grad, g.scalar(0.1f)}, Attrs{{"update", "ApplyFtrl"}, {"variables", std::int64_t{1}}});
  refused({grad, g.scalar(0.1f)}, Attrs{{"update", "ApplyAdam"}, {"variables", std::int64_t{1}}});  // no step
  refused({grad, grad, g.scalar(0.1f)}, Attrs{{"update", "ApplySgd"}, {"variables", std::int64_t{1}}});
  refused({grad, grad}, Attrs{{"update", "ApplySgd"}, {"variables", std::int64_t{1}}});  // a non-scalar rate
  CHECK_NOTHROW(g.add("FusedUpdate", {grad, grad, g.scalar(0.1f)},
                      Attrs{{"update", "ApplySgd"}, {"variables", std::int64_t{2}}}));
}
