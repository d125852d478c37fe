// libFuzzer harness: an array file (.npy or IDX) as a config's "data": {"x": ..., "y": ...} names it. The
// bytes are decoded directly (decode_array), then written to a file and loaded as both halves of a data set,
// as a classification and as a regression. Whatever decodes must hold as many values as its shape says.
#include <cstddef>
#include <cstdint>

#include "models/data/arrays.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const tctl::fuzz::ScratchDir scratch;
  const std::string bytes(tctl::fuzz::as_text(data, size));
  tctl::fuzz::accept_refusal([&] {
    const tctl::ArrayFile a = tctl::decode_array(bytes, "a.npy");
    std::int64_t n = 1;
    for (std::int64_t d : a.shape) n *= d;
    TCTL_CHECK(static_cast<std::size_t>(n) == a.values.size(), "an array's values do not fill its shape");
  });
  const std::string path = scratch.write("a.npy", bytes);
  for (bool classification : {true, false})
    tctl::fuzz::accept_refusal(
        [&] { (void)tctl::load_array_dataset(path, path, classification, "config.json", "data"); });
  return 0;
}
