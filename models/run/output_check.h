// The check that a command's output file destroys neither what the command reads nor a run.
#pragma once

#include <string>
#include <vector>

namespace tctl {

// Refuses (SpecError naming `flag`) an output path that, once symbolic links are followed, is one of
// `inputs` (files the command reads) or one of the files a tensorctl run keeps (model.json,
// weights.safetensors, its callbacks' files...) in whatever run directory it lands: writing it would destroy
// what the command reads, or a run. "-" and an empty path (standard output, no file) pass.
void check_output_keeps_inputs(const std::string& output, const std::string& flag,
                               const std::vector<std::string>& inputs = {});

}  // namespace tctl
