// Shared by the libFuzzer harnesses in this folder: which outcomes of hostile input are acceptable, what every
// model built from one is checked for, and a scratch folder for the readers that take a path.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/graph.h"
#include "models/nn/sequential.h"

namespace tctl::fuzz {

// Runs `body` on one input. Refusing the input with a SpecError (a user's mistake, exit 2) or a RuntimeError
// (exit 1) is what a reader should do; every other exception (nlohmann's own, std::out_of_range,
// std::bad_alloc, a ShapeError that no layer turned into a SpecError) propagates, and libFuzzer reports the
// std::terminate it ends in as a crash.
template <class Body>
void accept_refusal(Body&& body) {
  try {
    body();
  } catch (const SpecError&) {
  } catch (const RuntimeError&) {
  }
}

// Builds `spec` as the commands do, then does with the model what `tensorctl summary --json`, `train` and
// `predict` do: every layer's name, type, output shape and parameter count; the resolved spec; a training and
// an inference trace. The resolved spec must then build again into the same resolved spec: it is what
// model.json holds, and `predict` reads it back. Anything but success there is a finding, since from_json
// already accepted the model.
inline void build_model(const nlohmann::json& spec, const std::string& file) {
  // Without a limit, memory_limit_bytes() is the machine's memory, and a valid spec asking for gigabytes of
  // weights would allocate them, which libFuzzer reports as out of memory. The budget check itself is still
  // exercised, against this smaller limit.
  static const int limited = setenv("TENSORCTL_MEMORY_LIMIT", "64M", 1);
  (void)limited;
  const Sequential net = Sequential::from_json(spec, file, "", 0);

  std::string summary;
  for (std::size_t i = 0; i < net.layers().size(); ++i) {
    const Layer& layer = *net.layers()[i];
    summary += layer.name() + " (" + layer.type() + ") " +
               Shape::concat(-1, net.layer_output_shapes()[i]).keras_string() + " " +
               std::to_string(layer.param_count()) + "\n";
  }
  summary += std::to_string(net.param_count()) + " " + std::to_string(net.trainable_param_count()) + " " +
             std::to_string(net.activation_bytes_per_example());
  for (bool training : {true, false}) {
    Graph g;
    Output x = g.placeholder("x", DType::kF32, Shape::concat(-1, net.input_shape()));
    net.call(g, x, training, "cpu");
  }

  const nlohmann::json resolved = net.to_json();
  try {
    const Sequential again = Sequential::from_json(resolved, "model.json", "", 1);
    TCTL_CHECK(again.to_json() == resolved, "the resolved spec builds into a different model: " + resolved.dump());
  } catch (const SpecError& e) {
    TCTL_CHECK(false,
               std::string("the resolved spec of a built model is refused: ") + e.what() + "\n" + resolved.dump());
  }
}

// A folder of this process's own under $TMPDIR (else /tmp), removed when the process exits normally, for
// readers that take a path. A crash (the finding) skips that: scripts/fuzz.sh points TMPDIR at a folder it
// removes, and a harness run by hand removes the folders of earlier processes that are gone, named by their
// process id, when it starts.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    const std::filesystem::path parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    remove_abandoned(parent);
    std::string pattern = (parent / ("tctl-fuzz-" + std::to_string(::getpid()) + "-XXXXXX")).string();
    TCTL_CHECK(mkdtemp(pattern.data()) != nullptr, "cannot create a scratch folder under " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Writes `bytes` to the file `name` inside the folder, replacing it, and returns its path.
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    TCTL_CHECK(out.good(), "cannot write " + file.string());
    return file.string();
  }

 private:
  // tctl-fuzz-<pid>-XXXXXX folders of this user whose process no longer runs: real folders only (a link is
  // left alone), and any doubt (an error, a process of another user) keeps the folder.
  static void remove_abandoned(const std::filesystem::path& parent) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with("tctl-fuzz-")) continue;
      const std::size_t dash = name.find('-', 10);
      if (dash == std::string::npos || dash == 10 || dash > 19) continue;
      const std::string digits = name.substr(10, dash - 10);
      if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
      struct stat st {};
      if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) continue;
      const auto pid = static_cast<pid_t>(std::stoll(digits));
      if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
      std::error_code ignored;
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }

  std::filesystem::path path_;
};

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace tctl::fuzz
