// Images as data: PNG and JPEG decoded to the channels asked for (alpha dropped, colour made gray as
// TensorFlow's decode_image makes it), resized as tf.image.resize does (half-pixel centres, bilinear or nearest),
// loaded on worker threads with the same result as on one, and class folders listed as
// image_dataset_from_directory lists them; damaged files refused naming the file.
#include <filesystem>
#include <fstream>

#include <unistd.h>
#include <zlib.h>

#include <cstring>

#include <doctest/doctest.h>

#include "core/errors.h"
#include "image_files.h"
#include "models/data/images.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

namespace fs = std::filesystem;
using testing::jpeg_file;
using testing::png_file;
using testing::solid;

std::vector<float> resized(const DecodedImage& image, std::int64_t h, std::int64_t w,
                           ImageInterpolation mode = ImageInterpolation::kBilinear) {
  ImageOptions o{.height = h, .width = w, .channels = image.channels, .interpolation = mode};
  std::vector<float> out(static_cast<std::size_t>(o.features()));
  resize_image(image, o, out.data());
  return out;
}

// `png` without its colour-space chunks (sRGB, gAMA, cHRM, iCCP): a file that states no gamma.
std::string without_colour_space(const std::string& png) {
  std::string out = png.substr(0, 8);
  for (std::size_t at = 8; at + 12 <= png.size();) {
    const auto* b = reinterpret_cast<const unsigned char*>(png.data() + at);
    const std::size_t length = (std::size_t{b[0]} << 24) | (std::size_t{b[1]} << 16) | (std::size_t{b[2]} << 8) | b[3];
    const std::string type = png.substr(at + 4, 4);
    if (type != "sRGB" && type != "gAMA" && type != "cHRM" && type != "iCCP") out += png.substr(at, length + 12);
    at += length + 12;
  }
  return out;
}

DecodedImage gray(std::int64_t h, std::int64_t w, std::vector<std::uint8_t> pixels) {
  return DecodedImage{h, w, 1, std::move(pixels)};
}

struct Folder {
  fs::path root = fs::temp_directory_path() / ("tctl_images_" + std::to_string(::getpid()));
  Folder() { fs::create_directories(root); }
  ~Folder() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) const {
    fs::create_directories((root / name).parent_path());
    std::ofstream(root / name, std::ios::binary) << bytes;
    return (root / name).string();
  }
};

}  // namespace

TEST_SUITE("images") {
  TEST_CASE("PNG: gray, RGB and RGBA to the channels asked for; alpha dropped, colour weighed to gray") {
    const std::vector<std::uint8_t> rgba{255, 0, 0, 0, 0, 255, 0, 128, 0, 0, 255, 255, 10, 20, 30, 255};
    const std::string file = png_file(2, 2, PNG_FORMAT_RGBA, rgba);
    const DecodedImage rgb = decode_image(file, 3, "a.png");
    CHECK(rgb.height == 2);
    CHECK(rgb.width == 2);
    CHECK(rgb.pixels == std::vector<std::uint8_t>{255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30});
    // Gray as TensorFlow's decode_png makes it: libpng's rgb_to_gray, weights 0.299 and 0.587 (0.114 for
    // blue). This file states sRGB, so libpng weighs in linear light (through its 1/2.2 gamma tables): pure
    // red gives 255 * 0.299^(1 / 2.2) = 147, green 200, blue 95; dark values lose to the 8-bit tables.
    const DecodedImage g = decode_image(file, 1, "a.png");
    CHECK(g.pixels == std::vector<std::uint8_t>{147, 200, 95, 21});
    // A file that states no gamma is weighed as stored, truncated (libpng's integer weights 9797, 19234 and
    // 3737 of 32768): 76, 149 (where rounding 0.587 * 255 would give 150), 29, 18.
    CHECK(decode_image(without_colour_space(file), 1, "a.png").pixels == std::vector<std::uint8_t>{76, 149, 29, 18});
    const DecodedImage repeated = decode_image(png_file(2, 1, PNG_FORMAT_GRAY, {7, 200}), 3, "g.png");
    CHECK(repeated.pixels == std::vector<std::uint8_t>{7, 7, 7, 200, 200, 200});
    CHECK(decode_image(png_file(2, 1, PNG_FORMAT_GA, {7, 0, 200, 255}), 1, "ga.png").pixels ==
          std::vector<std::uint8_t>{7, 200});
  }

  TEST_CASE("JPEG: gray and RGB files, within JPEG's loss of the pixels written") {
    const DecodedImage g = decode_image(jpeg_file(8, 8, 1, solid(8, 8, {100})), 1, "g.jpg");
    REQUIRE(g.pixels.size() == 64);
    for (std::uint8_t v : g.pixels) CHECK(std::abs(v - 100) <= 2);
    const DecodedImage rgb = decode_image(jpeg_file(16, 8, 3, solid(16, 8, {200, 40, 10})), 3, "c.jpg");
    REQUIRE(rgb.pixels.size() == 16 * 8 * 3);
    CHECK(std::abs(rgb.pixels[0] - 200) <= 3);
    CHECK(std::abs(rgb.pixels[1] - 40) <= 3);
    CHECK(std::abs(rgb.pixels[2] - 10) <= 3);
    const DecodedImage weighed = decode_image(jpeg_file(16, 8, 3, solid(16, 8, {200, 40, 10})), 1, "c.jpg");
    CHECK(std::abs(weighed.pixels[5] - 84) <= 3);  // the luma 0.299*200 + 0.587*40 + 0.114*10 = 84.4
    CHECK(decode_image(jpeg_file(4, 4, 1, solid(4, 4, {50})), 3, "g.jpg").pixels.size() == 48);
  }

  TEST_CASE("a colour JPEG read as gray is its luma as stored, as TensorFlow asks libjpeg for it") {
    // Stripes one pixel wide of red and of blue: their chroma, stored at half resolution, blurs, and RGB
    // decoded from it clips, so gray weighed from that RGB misses the stripes' luma (0.299 * 255 = 76 and
    // 0.114 * 255 = 29) by far more than the luma's own loss.
    std::vector<std::uint8_t> stripes;
    for (int i = 0; i < 16 * 16; ++i) {
      const bool red = i % 2 == 0;
      stripes.insert(stripes.end(), {std::uint8_t(red ? 255 : 0), 0, std::uint8_t(red ? 0 : 255)});
    }
    const DecodedImage g = decode_image(jpeg_file(16, 16, 3, stripes, 100), 1, "stripes.jpg");
    REQUIRE(g.pixels.size() == 256);
    int worst = 0;
    for (std::size_t i = 0; i < g.pixels.size(); ++i)
      worst = std::max(worst, std::abs(g.pixels[i] - (i % 2 == 0 ? 76 : 29)));
    CHECK(worst <= 3);
  }

  TEST_CASE("damaged, foreign and oversized files are refused naming the file") {
    const std::string file = png_file(4, 4, PNG_FORMAT_GRAY, solid(4, 4, {9}));
    testing::check_spec_error([&] { (void)decode_image(file.substr(0, file.size() - 20), 1, "cut.png"); }, "cut.png",
                              "", {"a damaged PNG file"});
    testing::check_spec_error([&] { (void)decode_image("TIFF....", 1, "x.png"); }, "x.png", "",
                              {"not a PNG, JPEG, BMP or GIF file"});
    const std::string jpeg = jpeg_file(8, 8, 1, solid(8, 8, {1}));
    testing::check_spec_error([&] { (void)decode_image(jpeg.substr(0, 30), 1, "cut.jpg"); }, "cut.jpg", "",
                              {"a JPEG file libjpeg cannot read"});
    // A header that claims 40,000 columns, or 10,000 x 10,000 pixels, is refused before anything is allocated.
    auto claim = [&](std::uint32_t width, std::uint32_t height) {
      std::string forged = file;
      for (int b = 0; b < 4; ++b) {
        forged[static_cast<std::size_t>(16 + b)] = static_cast<char>((width >> (24 - 8 * b)) & 0xff);
        forged[static_cast<std::size_t>(20 + b)] = static_cast<char>((height >> (24 - 8 * b)) & 0xff);
      }
      // The IHDR chunk's CRC, over its type and data (bytes 12 to 28), so libpng reads the forged size.
      const auto crc = static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(forged.data() + 12), 17));
      for (int b = 0; b < 4; ++b)
        forged[static_cast<std::size_t>(29 + b)] = static_cast<char>((crc >> (24 - 8 * b)) & 0xff);
      return forged;
    };
    for (const auto& [w, h] : {std::pair{40000u, 4u}, std::pair{10000u, 10000u}})
      testing::check_spec_error([&] { (void)decode_image(claim(w, h), 1, "big.png"); }, "big.png", "",
                                {"pixels; at most 32768 on a side and 67108864 in all are read"});
  }

  TEST_CASE("a 16-bit PNG keeps each sample's high byte and no gamma applies, as TensorFlow decodes it") {
    // libpng's simplified writer marks linear 16-bit data with gAMA 1.0; its simplified reader would turn
    // 0x8000 into sRGB's 188. TensorFlow (png_set_strip_16, no gamma handling) reads 128.
    const std::vector<std::uint16_t> samples{0x8000, 0x4000, 0xffff, 0x01ff};
    std::vector<std::uint8_t> bytes(samples.size() * 2);
    std::memcpy(bytes.data(), samples.data(), bytes.size());
    const std::string file = png_file(2, 2, PNG_FORMAT_LINEAR_Y, bytes);
    CHECK(decode_image(file, 1, "deep.png").pixels == std::vector<std::uint8_t>{128, 64, 255, 1});
    CHECK(decode_image(file, 3, "deep.png").pixels ==
          std::vector<std::uint8_t>{128, 128, 128, 64, 64, 64, 255, 255, 255, 1, 1, 1});
  }

  TEST_CASE("bilinear resizing as tf.image.resize: half-pixel centres, edges clamped") {
    // 2x2 to 4x4: source coordinates -0.25, 0.25, 0.75, 1.25, clamped to [0, 1].
    const auto up = resized(gray(2, 2, {0, 10, 20, 30}), 4, 4);
    CHECK(up == std::vector<float>{0, 2.5f, 7.5f, 10, 5, 7.5f, 12.5f, 15, 15, 17.5f, 22.5f, 25, 20, 22.5f, 27.5f, 30});
    // 4x4 to 2x2: each output the mean of a 2x2 block (coordinates 0.5 and 2.5).
    std::vector<std::uint8_t> ramp(16);
    for (int i = 0; i < 16; ++i) ramp[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i * 4);
    CHECK(resized(gray(4, 4, ramp), 2, 2) == std::vector<float>{10, 18, 42, 50});
    CHECK(resized(gray(4, 4, ramp), 2, 2, ImageInterpolation::kNearest) == std::vector<float>{20, 28, 52, 60});
    CHECK(resized(gray(4, 4, ramp), 4, 4) == std::vector<float>(ramp.begin(), ramp.end()));
    // Channels stay apart.
    const DecodedImage rgb{1, 2, 3, {0, 100, 200, 10, 110, 210}};
    CHECK(resized(rgb, 1, 1) == std::vector<float>{5, 105, 205});
  }

  TEST_CASE("class folders: sorted classes and files, other files skipped; threads change nothing") {
    Folder f;
    f.write("b/2.png", png_file(3, 2, PNG_FORMAT_GRAY, solid(3, 2, {30})));
    f.write("b/1.JPG", jpeg_file(8, 8, 1, solid(8, 8, {200})));
    f.write("a/x.png", png_file(2, 2, PNG_FORMAT_RGB, solid(2, 2, {90, 90, 90})));
    f.write("a/deeper/y.jpeg", jpeg_file(8, 8, 3, solid(8, 8, {10, 10, 10})));
    f.write("a/notes.txt", "not an image");
    f.write("top.png", png_file(1, 1, PNG_FORMAT_GRAY, {1}));
    // A hidden folder is no class, as in Keras (a notebook's checkpoints beside the classes).
    f.write(".ipynb_checkpoints/z.png", png_file(1, 1, PNG_FORMAT_GRAY, {2}));
    const ImageFolder folder = list_image_folder(f.root.string(), "c.json", "data.images.directory");
    CHECK(folder.class_names == std::vector<std::string>{"a", "b"});
    REQUIRE(folder.paths.size() == 4);
    CHECK(fs::path(folder.paths[0]).filename() == "y.jpeg");
    CHECK(fs::path(folder.paths[1]).filename() == "x.png");
    CHECK(fs::path(folder.paths[2]).filename() == "1.JPG");
    CHECK(folder.labels == std::vector<std::int32_t>{0, 0, 1, 1});
    const ImageOptions o{.height = 4, .width = 4, .channels = 1, .interpolation = ImageInterpolation::kBilinear};
    const Tensor one = load_images(folder.paths, o, 1);
    const Tensor two = load_images(folder.paths, o, 2);
    REQUIRE(one.shape() == Shape{4, 16});
    CHECK(std::vector<float>(one.data<float>(), one.data<float>() + 64) ==
          std::vector<float>(two.data<float>(), two.data<float>() + 64));
    CHECK(one.data<float>()[16] == 90.0f);  // x.png: gray 90 in every channel
    CHECK(one.data<float>()[63] == 30.0f);  // 2.png, upscaled from 3 x 2
    CHECK(list_images(f.root.string()).size() == 6);
  }

  TEST_CASE("a folder that is no class folder, and the first bad file whichever thread meets it") {
    Folder f;
    testing::check_spec_error(
        [&] { (void)list_image_folder((f.root / "none").string(), "c.json", "data.images.directory"); }, "c.json",
        "data.images.directory", {"is no folder"});
    f.write("only/1.png", png_file(1, 1, PNG_FORMAT_GRAY, {1}));
    testing::check_spec_error([&] { (void)list_image_folder(f.root.string(), "c.json", "data.images.directory"); },
                              "c.json", "data.images.directory", {"has 1 subfolders"});
    fs::create_directories(f.root / "empty");
    testing::check_spec_error([&] { (void)list_image_folder(f.root.string(), "c.json", "data.images.directory"); },
                              "c.json", "data.images.directory",
                              {"class folder \"empty\" holds no .png, .jpg, .jpeg, .bmp or .gif file"});
    std::vector<std::string> paths;
    for (int i = 0; i < 12; ++i)
      paths.push_back(
          f.write("many/" + std::to_string(10 + i) + ".png", png_file(2, 2, PNG_FORMAT_GRAY, solid(2, 2, {5}))));
    f.write("many/15.png", "broken");
    f.write("many/19.png", "broken too");
    const ImageOptions o{.height = 2, .width = 2, .channels = 1, .interpolation = ImageInterpolation::kBilinear};
    for (int threads : {1, 3})
      testing::check_spec_error([&] { (void)load_images(paths, o, threads); }, paths[5], "",
                                {"not a PNG, JPEG, BMP or GIF file"});
  }
}

}  // namespace tctl
