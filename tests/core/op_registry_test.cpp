#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "core/scalar_spec.h"

using namespace tctl;
using testing::scalar_spec;

namespace {
void noop_cpu(KernelContext&) {}

}  // namespace

// A kernel may register before its op's definition: registrars in one file run top to bottom.
TCTL_REGISTER_KERNEL("TestKernelFirst", "cpu", noop_cpu);
TCTL_REGISTER_OP({.name = "TestKernelFirst", .num_inputs = 0, .infer = scalar_spec});

TEST_CASE("core defines every op family's ops, though core is a static library") {
  const std::vector<std::string> names = op_names();
  for (const char* op : {"Relu", "BatchNorm", "Concat", "Conv2D", "FusedConv2D", "Delay", "Dropout", "Add", "Mse",
                         "MatMul", "FusedMatMul", "ApplyAdam", "MaxPool2D", "Sum", "Reshape"}) {
    CAPTURE(op);
    CHECK(std::binary_search(names.begin(), names.end(), op));
    CHECK(static_cast<bool>(op_def(op).infer));
  }
  CHECK(static_cast<bool>(op_def("Conv2D").grad));
}

TEST_CASE("every defined op has a CPU kernel, and no kernel belongs to an undefined op") {
  check_op_registry();  // aborts on a kernel whose op is never defined
  for (const std::string& name : op_names()) {
    CAPTURE(name);
    CHECK((op_def(name).kernel(DeviceKind::cpu()) != nullptr));
  }
}

TEST_CASE("a kernel registered before its op's definition is kept") {
  CHECK((op_def("TestKernelFirst").kernel(DeviceKind::cpu()) == &noop_cpu));
  CHECK((op_def("TestKernelFirst").kernel(device_kind("sim")) == nullptr));
}

// A second kernel for one (op, device kind) is a broken invariant, which aborts; a child process tries it.
TEST_CASE("a second kernel for the same op and device kind is refused") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Quietly: without doctest's crash handler, which would report the abort as this test's failure.
    std::signal(SIGABRT, SIG_DFL);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
    }
    register_kernel("Relu", DeviceKind::cpu(), noop_cpu);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK((op_def("Relu").kernel(DeviceKind::cpu()) != &noop_cpu));
}
