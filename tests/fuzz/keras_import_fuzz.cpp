// libFuzzer harness: a Keras model file as `tensorctl import-keras` and `summary` read it. JSON text ->
// parse_json_text -> keras_to_spec -> the spec printed as import-keras prints it -> Sequential::from_json ->
// what the commands do with the built model (fuzz_util.h build_model).
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/io/keras_import.h"
#include "models/io/spec_reader.h"
#include "models/nn/sequential.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tctl::fuzz::accept_refusal([&] {
    const nlohmann::json doc = tctl::parse_json_text(std::string(tctl::fuzz::as_text(data, size)), "model.json");
    // summary imports only what looks like a Keras file; import-keras converts whatever it is given.
    (void)tctl::is_keras_model_json(doc);
    const nlohmann::json spec = tctl::keras_to_spec(doc, "model.json", tctl::keras_layer_mappings());
    const std::string printed = spec.dump(2);
    (void)tctl::keras_source_description(doc);
    tctl::fuzz::build_model(tctl::parse_json_text(printed, "spec.json"), "spec.json");
  });
  return 0;
}
