// libFuzzer harness: a model spec as `tensorctl summary` and `train` read it. JSON text -> parse_json_text ->
// Sequential::from_json -> what the commands do with the built model (fuzz_util.h build_model).
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/io/spec_reader.h"
#include "models/nn/sequential.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tctl::fuzz::accept_refusal([&] {
    const nlohmann::json spec = tctl::parse_json_text(std::string(tctl::fuzz::as_text(data, size)), "spec.json");
    tctl::fuzz::build_model(spec, "spec.json");
  });
  return 0;
}
