// A CUDA kernel launch that fails (issue 16): the run throws the RuntimeError that names the node, its op
// and the device, as an out-of-memory does (whose path through `tensorctl train` to one line, exit 1 and an
// intact checkpoint tests/cli/placement_test.cpp checks on sim:0), and the GPU runs the next step. The ops are
// in launch_failure.cu, built with the CUDA backend only.
#include <doctest/doctest.h>

#if defined(TENSORCTL_WITH_CUDA)
#include <string>
#include <vector>

#include "core/device.h"
#include "core/errors.h"
#include "core/session.h"

namespace tctl {

TEST_CASE("a failed kernel launch on cuda:0 is a RuntimeError naming the node, and the GPU works on") {
  // The test ops have no CPU kernel to fall back to (ctest runs this suite only where cuda:0 is present).
  if (DeviceRegistry::instance().find("cuda:0") == nullptr) {
    MESSAGE("skipped: cuda:0 is absent");
    return;
  }
  auto g = std::make_shared<Graph>();
  const Output x = g->placeholder("x", DType::kF32, Shape{300});
  Output bad, good;
  {
    Graph::Scope scope(*g, "layer", "cuda:0", Phase::kForward);
    bad = g->add("TestBadLaunch", {x});
    good = g->add("TestGoodLaunch", {x});
  }
  ThreadPool inter(1), intra(1);
  Session session(g, inter, intra);
  const std::vector<Feed> feeds{{x, Tensor::filled(Shape{300}, 1.0f)}};
  const std::vector<Output> fetch_bad{bad}, fetch_good{good};
  std::string message;
  try {
    session.run(feeds, fetch_bad);
  } catch (const RuntimeError& e) {
    message = e.what();
  }
  INFO(message);
  // The runtime's own words for the error follow; they vary between CUDA versions (CUDA 13 on an H200 said
  // "invalid argument" where older runtimes say "invalid configuration argument"), so only their presence counts.
  const std::string prefix = "(TestBadLaunch) on cuda:0: kernel launch failed: ";
  const std::size_t at = message.find(prefix);
  REQUIRE(at != std::string::npos);
  CHECK(message.size() > at + prefix.size());
  CHECK(message.find("layer/") != std::string::npos);
  const std::vector<Tensor> y = session.run(feeds, fetch_good);
  CHECK(y[0].to_floats() == std::vector<float>(300, 2.0f));
}

}  // namespace tctl
#endif
