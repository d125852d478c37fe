// libFuzzer harness: a Keras model file as a train config's "model" names it (models/record/keras_model_file.h):
// the bytes written to a file and read as a .keras archive, an .h5 file or JSON by their first bytes; what
// converts is built and given the file's weights. The HDF5 inside is parsed by libhdf5 itself.
#include <cstddef>
#include <cstdint>

#include "models/io/keras_import.h"
#include "models/nn/layer.h"
#include "models/nn/sequential.h"
#include "models/record/keras_model_file.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const tctl::fuzz::ScratchDir scratch;
  const std::string path = scratch.write("m.keras", tctl::fuzz::as_text(data, size));
  tctl::fuzz::accept_refusal([&] {
    const tctl::KerasModelFile file = tctl::read_keras_model_file(path);
    if (!file.has_weights()) return;
    const nlohmann::json spec = tctl::keras_to_spec(file.config, file.place, tctl::keras_layer_mappings());
    // Small models only: the harness is about reading, not about allocating what a spec asks for.
    if (tctl::Sequential::check(spec, path, "").params > (1 << 20)) return;
    const tctl::Sequential net = tctl::Sequential::from_json(spec, path, "", 1);
    tctl::load_keras_weights(path, net);
  });
  return 0;
}
