// libFuzzer harness: a weights file or checkpoint as `predict`, `evaluate` and `--resume` read it.
// decode_safetensors on the bytes; a file it accepts must encode and decode again to the same tensors and
// metadata, and check_against must accept it as its own expectation.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "models/io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace {
bool same_tensors(const tctl::SafetensorsFile& a, const tctl::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const tctl::Tensor& x = a.tensors[i].value;
    const tctl::Tensor& y = b.tensors[i].value;
    if (a.tensors[i].name != b.tensors[i].name || x.dtype() != y.dtype() || !(x.shape() == y.shape()) ||
        x.bytes() != y.bytes() || (x.bytes() > 0 && std::memcmp(x.raw_data(), y.raw_data(), x.bytes()) != 0))
      return false;
  }
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tctl::fuzz::accept_refusal([&] {
    const tctl::SafetensorsFile file = tctl::decode_safetensors(tctl::fuzz::as_text(data, size), "weights.safetensors");
    const tctl::SafetensorsFile again =
        tctl::decode_safetensors(tctl::encode_safetensors(file.tensors, file.metadata), "again.safetensors");
    TCTL_CHECK(same_tensors(file, again), "a decoded file does not survive encoding and decoding again");
    tctl::check_against(file, file.tensors, "weights.safetensors");
  });
  return 0;
}
