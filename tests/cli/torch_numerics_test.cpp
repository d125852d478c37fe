// The recurrent layers' outputs and gradients against PyTorch's (tests/torch/recurrent_vs_torch.py, through
// the binary: train, resume, predict), within 1e-5. Skipped, with a message, where /usr/bin/python3 has no
// torch (Debian's python3-torch; scripts/setup.sh does not install it, bench/compare_pytorch.sh does).
#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {

TEST_SUITE("numerics against PyTorch") {
  TEST_CASE("SimpleRNN, LSTM, GRU and Bidirectional match torch's forward and gradients within 1e-5") {
    TempDir d;
    const CommandResult r =
        run_shell_command("/usr/bin/python3 " + quoted(source_path("tests/torch/recurrent_vs_torch.py")) + " " +
                              quoted(TENSORCTL_BINARY) + " .",
                          d.path());
    INFO(r.out);
    if (r.status == 77) {
      MESSAGE("/usr/bin/python3 has no torch module (python3-torch): the comparison is skipped");
      return;
    }
    CHECK(r.status == 0);
    CHECK(r.out.find("\"LSTM\"") != std::string::npos);
  }
}

}  // namespace tctl::cli_test
