// libFuzzer harness: an image file as a folder of class folders or predict's input holds it. The bytes are
// decoded as PNG, JPEG, BMP or GIF (by their first bytes) into gray and RGB, each result resized up and down
// with both interpolations; a decoded image must hold height x width x channels samples within the size limit.
#include <cstddef>
#include <cstdint>

#include "models/data/images.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(tctl::fuzz::as_text(data, size));
  for (int channels : {1, 3})
    tctl::fuzz::accept_refusal([&] {
      const tctl::DecodedImage image = tctl::decode_image(bytes, channels, "a.png");
      TCTL_CHECK(image.channels == channels && image.height >= 1 && image.width >= 1 &&
                     image.height <= tctl::kMaxImageSide && image.width <= tctl::kMaxImageSide,
                 "a decoded image out of its bounds");
      TCTL_CHECK(image.pixels.size() == static_cast<std::size_t>(image.height * image.width * channels),
                 "a decoded image's samples do not fill it");
      for (auto mode : {tctl::ImageInterpolation::kBilinear, tctl::ImageInterpolation::kNearest})
        for (std::int64_t side : {std::int64_t{3}, std::int64_t{17}}) {
          const tctl::ImageOptions o{.height = side, .width = side + 1, .channels = channels, .interpolation = mode};
          std::vector<float> out(static_cast<std::size_t>(o.features()));
          tctl::resize_image(image, o, out.data());
          for (float v : out) TCTL_CHECK(v >= 0.0f && v <= 255.0f, "a resized sample outside 0..255");
        }
    });
  return 0;
}
