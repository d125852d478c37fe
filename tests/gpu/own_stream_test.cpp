// An optimizer update on a thread's own CUDA stream (race-check's threads) with a NaN gradient:
// the report is read at once there, so the run throws the CPU's NonFiniteError and the update has written
// nothing, in every locking mode, for a bias-sized variable (one block that checks its gradient itself) and a
// larger one (the guard's own pass first). The main stream's path is in tests/kernels/optimizers_test.cpp.
#include <doctest/doctest.h>

#if defined(TENSORCTL_WITH_CUDA)
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/errors.h"
#include "core/session.h"
#include "core/variable.h"

namespace tctl {

namespace {
// Runs ApplyAdam (lr 0.1, first step) of `grad` on `vars` (the weight and its two slots), all on cuda:0.
void run_adam(const std::vector<std::shared_ptr<Variable>>& vars, const std::vector<float>& grad) {
  const Shape shape{static_cast<std::int64_t>(grad.size())};
  auto g = std::make_shared<Graph>();
  Output update;
  {
    Graph::Scope scope(*g, "optimizer", "cuda:0", Phase::kUpdate);
    std::vector<VarUse> uses;
    for (const auto& v : vars) uses.push_back({v, true});
    update = g->add("ApplyAdam", {g->constant(Tensor::from_floats(shape, grad)), g->scalar(0.1f), g->scalar(0.0f)},
                    Attrs{{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-7}}, std::move(uses));
  }
  // One inter-op thread: the calling thread, which holds the own stream, runs every node. Strict placement:
  // an update that fell back to the CPU would not test the GPU's path.
  ThreadPool inter(1), intra(1);
  SessionOptions options;
  options.placement.strict = true;
  Session session(g, inter, intra, options);
  const std::vector<Output> targets{update};
  session.run({}, {}, targets);
}
}  // namespace

TEST_CASE("a bad gradient on a thread's own cuda:0 stream throws NonFiniteError and writes nothing, in every mode") {
  Device* gpu = DeviceRegistry::instance().find("cuda:0");
  if (gpu == nullptr) {
    MESSAGE("skipped: cuda:0 is absent");
    return;
  }
  const std::unique_ptr<OwnStream> own = gpu->own_stream();
  REQUIRE(own != nullptr);
  CHECK(gpu->has_own_streams());
  for (const std::int64_t n : {std::int64_t{2048}, std::int64_t{70000}}) {
    for (const LockingMode mode : {LockingMode::kNone, LockingMode::kAtomic, LockingMode::kMutex, LockingMode::kProcess,
                                   LockingMode::kSnapshot, LockingMode::kDataflow}) {
      CAPTURE(n);
      CAPTURE(locking_mode_name(mode));
      const auto size = static_cast<std::size_t>(n);
      std::vector<std::shared_ptr<Variable>> vars;
      for (const char* name : {"dense/kernel", "m", "v"}) {
        vars.push_back(std::make_shared<Variable>(name, Tensor::filled(Shape{n}, 0.5f), mode));
        vars.back()->place_on(gpu);
      }
      std::vector<float> grad(size, 0.25f);
      grad[size / 2] = std::numeric_limits<float>::quiet_NaN();
      std::string message;
      try {
        run_adam(vars, grad);
      } catch (const NonFiniteError& e) {
        message = e.what();
      }
      CHECK(message ==
            "gradient of dense/kernel is NaN (element " + std::to_string(n / 2) + " of " + std::to_string(n) + ")");
      for (const auto& v : vars) CHECK(v->read().to(cpu_device()).to_floats() == std::vector<float>(size, 0.5f));

      // With the bad element made finite the same update writes, so the check above can fail.
      grad[size / 2] = 0.25f;
      run_adam(vars, grad);
      CHECK(vars[0]->read().to(cpu_device()).to_floats()[size / 2] < 0.5f);
    }
  }
}

}  // namespace tctl
#endif
