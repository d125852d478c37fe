#include "models/run/output_check.h"

#include "core/errors.h"
#include "models/io/atomic_file.h"
#include "models/io/run_layout.h"
#include "models/record/run_files.h"
#include "models/record/train_config.h"

namespace tctl {

void check_output_keeps_inputs(const std::string& output, const std::string& flag,
                               const std::vector<std::string>& inputs) {
  if (output.empty() || output == "-") return;
  namespace fs = std::filesystem;
  std::error_code ec;
  // Where the bytes land: a link is followed, as write_file_atomic follows it.
  const fs::path target = final_target(output);
  for (const std::string& input : inputs)
    if (!input.empty() && fs::equivalent(target, input, ec) && !ec)
      throw SpecError("", flag,
                      output + (output == input ? " is" : " leads to " + input + ",") +
                          " the file this command reads; write the output under another name");
  const fs::path dir = fs::absolute(target, ec).parent_path();
  if (ec) return;
  const bool run = RunLayout(dir).holds_run(RunEvidence::kTrained);
  const std::string name = target.filename().string();
  if (run && RunLayout::is_run_file(name, run_file_names(dir, TrainConfig{})))
    throw SpecError("", flag,
                    output + " is the file " + name + " of the run in " + dir.string() +
                        "; write the output outside the run or under another name");
}

}  // namespace tctl
