// A command line's `--set KEY=VALUE`: one key of a train config or of its model spec changed for one command,
// without editing the file, as Hydra's and Lightning's overrides do. The config is read with its overrides
// set in its JSON first, so each is typed and checked exactly as the file's own value would be, and the run
// records the config as it ran.
//
//   KEY    a path of object keys and list indices: "optimizer.learning_rate", "data.validation_split",
//          "callbacks[0].patience". A key of the model spec ("layers[1].units", "input_shape", "name"), or one
//          under "model." when the config names a spec file, changes the spec the config reads.
//   VALUE  JSON when it reads as JSON (3e-4, 64, true, [28, 28, 1], "a string"), else the text as a string
//          (data.csv=other.csv). A path is relative to the config's folder, as in the file.
#pragma once

#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "models/record/train_config.h"

namespace tctl {

struct ConfigOverride {
  std::string key;
  nlohmann::json value;
  std::string text;  // as the command line gave it, for messages
};

// "KEY=VALUE" as an override. SpecError("", "--set", ...) without an '=', with an empty key, or with a key that
// is no path ("layers[x]", "a..b").
ConfigOverride parse_override(const std::string& text);

// `value` set at `key`'s path in `doc`, objects made on the way where the path finds none. SpecError("--set KEY",
// "", ...) when the path runs through a value that is no object (or no list, for an index), or an index past
// the list's end.
void apply_override(nlohmann::json& doc, const std::string& key, const nlohmann::json& value);

// load_train_config with `overrides` set: the config's keys in its JSON before it is read, the model spec's in
// the spec the config names.
TrainConfig load_train_config(const std::string& path, std::span<const ConfigOverride> overrides);

}  // namespace tctl
