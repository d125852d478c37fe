// BMP and GIF as image data (models/data/image_formats.h): read through decode_image as Keras' decode_image
// reads them (BMP rows bottom-up or top-down and padded, BGR(A) order, palettes; a GIF's first frame on its
// screen, transparent and uncovered pixels black, interlacing undone), made gray by JPEG's luma weights, listed
// in class folders by their extensions, and damaged or unsupported files refused naming the file.
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <doctest/doctest.h>

#include "core/errors.h"
#include "image_files.h"
#include "models/data/image_formats.h"
#include "models/data/images.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using testing::bmp_file;
using testing::BmpSpec;
using testing::gif_file;
using testing::GifFrame;

using Bytes = std::vector<std::uint8_t>;

// Red, green, blue, white, gray 77 and black, and their luma: (19595 R + 38470 G + 7471 B + 32768) >> 16.
const Bytes kSix{255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255, 77, 77, 77, 0, 0, 0};
const Bytes kSixGray{76, 150, 29, 255, 77, 0};

// `gif` with its global palette cut to its first 2^bits colours, or taken out (bits 0): what giflib does not
// write, a frame without a palette, or of indices past it (its writer masks them to the palette's bits).
std::string with_global_palette_cut(const std::string& gif, int bits) {
  const auto flags = static_cast<unsigned char>(gif[10]);
  REQUIRE((flags & 0x80) != 0);
  const std::size_t palette = std::size_t{3} << ((flags & 7) + 1);
  const std::size_t kept = bits == 0 ? 0 : std::size_t{3} << bits;
  REQUIRE(kept <= palette);
  const auto cut = static_cast<char>(bits == 0 ? flags & 0x78 : (flags & 0xf8) | (bits - 1));
  return gif.substr(0, 10) + cut + gif.substr(11, 2 + kept) + gif.substr(13 + palette);
}

void check_refused(const std::string& bytes, const std::string& expected) {
  for (int channels : {1, 3})
    testing::check_spec_error([&] { decode_image(bytes, channels, "x.img"); }, "x.img", "", {expected});
}

}  // namespace

TEST_SUITE("image formats") {
  TEST_CASE("BMP: 24-bit rows stored bottom-up and padded to 4 bytes, read as RGB and as gray") {
    // 3 pixels of 3 bytes: each row padded from 9 to 12 bytes.
    const std::string file = bmp_file({.width = 3, .height = 2, .bits = 24, .samples = kSix});
    CHECK(file.size() == 54 + 2 * 12);
    CHECK(looks_like_image(file));
    const DecodedImage rgb = decode_image(file, 3, "a.bmp");
    CHECK(rgb.height == 2);
    CHECK(rgb.width == 3);
    CHECK(rgb.channels == 3);
    CHECK(rgb.pixels == kSix);
    const DecodedImage gray = decode_image(file, 1, "a.bmp");
    CHECK(gray.channels == 1);
    CHECK(gray.pixels == kSixGray);
  }

  TEST_CASE("BMP: 32-bit top-down, alpha dropped; bit fields in BGRA order read, in any other refused") {
    Bytes rgba;
    for (std::size_t i = 0; i < kSix.size(); i += 3) rgba.insert(rgba.end(), {kSix[i], kSix[i + 1], kSix[i + 2], 7});
    std::string file = bmp_file({.width = 2, .height = 3, .bits = 32, .samples = rgba, .top_down = true});
    CHECK(decode_image(file, 3, "a.bmp").pixels == kSix);
    // Compression 3 with the masks of BGRA after the 40-byte header, pixels moved 12 bytes on.
    std::string fields = file.substr(0, 54) + std::string(12, '\0') + file.substr(54);
    fields[10] = static_cast<char>(54 + 12);
    fields[30] = 3;
    auto mask = [&fields](std::size_t at, std::uint32_t v) {
      for (int i = 0; i < 4; ++i) fields[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
    };
    mask(54, 0x00ff0000u);
    mask(58, 0x0000ff00u);
    mask(62, 0x000000ffu);
    CHECK(decode_image(fields, 3, "a.bmp").pixels == kSix);
    mask(54, 0x000000ffu);  // red where blue is
    mask(62, 0x00ff0000u);
    check_refused(fields, "a BMP whose bit fields are not 8-bit BGR(A)");
  }

  TEST_CASE("BMP: 8 bits through the palette, colour or gray; OS/2's header") {
    const Bytes indices{0, 1, 2, 3, 4, 5};
    for (bool os2 : {false, true}) {
      CAPTURE(os2);
      const std::string file =
          bmp_file({.width = 3, .height = 2, .bits = 8, .samples = indices, .palette = kSix, .os2 = os2});
      CHECK(decode_image(file, 3, "a.bmp").pixels == kSix);
      CHECK(decode_image(file, 1, "a.bmp").pixels == kSixGray);
    }
    // A gray ramp's palette reads the index itself, as TensorFlow (which ignores the palette) reads it.
    Bytes ramp;
    for (int v = 0; v < 256; ++v)
      ramp.insert(ramp.end(),
                  {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v)});
    const Bytes some{0, 9, 128, 200, 254, 255};
    const std::string file = bmp_file({.width = 2, .height = 3, .bits = 8, .samples = some, .palette = ramp});
    CHECK(decode_image(file, 1, "a.bmp").pixels == some);
  }

  TEST_CASE("BMP: compressed, 16-bit, truncated, too large and damaged files refused naming the file") {
    const std::string good = bmp_file({.width = 3, .height = 2, .bits = 24, .samples = kSix});
    std::string rle = good;
    rle[30] = 1;
    check_refused(rle, "an RLE-compressed BMP; uncompressed ones are read");
    std::string sixteen = good;
    sixteen[28] = 16;
    check_refused(sixteen, "a BMP of 16 bits a pixel; 8, 24 and 32 are read");
    check_refused(good.substr(0, good.size() - 1),
                  "a damaged BMP file: 24 bytes of pixels from byte 54, but the file has 77 bytes");
    check_refused(good.substr(0, 40), "a damaged BMP file: it ends inside its header");
    std::string odd_header = good;
    odd_header[14] = 41;
    check_refused(odd_header, "a damaged BMP file: no header of a known size");
    std::string wide = good;
    wide[20] = 1;  // 65539 pixels wide
    check_refused(wide, "an image of 65539 x 2 pixels; at most 32768 on a side");
    // An index past a palette of 4 colours.
    const std::string past = bmp_file({.width = 3,
                                       .height = 2,
                                       .bits = 8,
                                       .samples = {0, 1, 2, 3, 4, 0},
                                       .palette = Bytes(kSix.begin(), kSix.begin() + 12)});
    check_refused(past, "a damaged BMP file: colour 4 of a palette of 4 at pixel (1, 1)");
  }

  TEST_CASE("GIF: the first frame through the global palette, or through its own") {
    const GifFrame frame{.width = 3, .height = 2, .indices = {0, 1, 2, 3, 4, 5}};
    const std::string file = gif_file(3, 2, kSix, {frame});
    CHECK(looks_like_image(file));
    const DecodedImage rgb = decode_image(file, 3, "a.gif");
    CHECK(rgb.height == 2);
    CHECK(rgb.width == 3);
    CHECK(rgb.pixels == kSix);
    CHECK(decode_image(file, 1, "a.gif").pixels == kSixGray);
    // Its own palette (the six colours reversed, and so its indices) wins over the global one.
    GifFrame own = frame;
    own.indices = {5, 4, 3, 2, 1, 0};
    for (std::size_t i = kSix.size(); i >= 3; i -= 3)
      own.palette.insert(own.palette.end(), kSix.begin() + static_cast<std::ptrdiff_t>(i - 3),
                         kSix.begin() + static_cast<std::ptrdiff_t>(i));
    CHECK(decode_image(gif_file(3, 2, kSix, {own}), 3, "a.gif").pixels == kSix);
    CHECK(decode_image(gif_file(3, 2, {}, {own}), 3, "a.gif").pixels == kSix);
  }

  TEST_CASE("GIF: a frame smaller than the screen, and its transparent pixels, read black") {
    // A 2 x 1 frame at (1, 1) of a 3 x 2 screen, its second pixel of the transparent index 3.
    const GifFrame frame{.left = 1, .top = 1, .width = 2, .height = 1, .indices = {0, 3}, .transparent = 3};
    const std::string file = gif_file(3, 2, kSix, {frame});
    const Bytes expected{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0, 0, 0, 0};
    CHECK(decode_image(file, 3, "a.gif").pixels == expected);
    // The graphics control block in a sub-block of 5 bytes, not 4: its transparent index still holds.
    std::string longer = file;
    const auto at = longer.find(std::string("\x21\xf9\x04", 3));
    REQUIRE(at != std::string::npos);
    longer[at + 2] = 5;
    longer.insert(at + 7, 1, '\0');
    CHECK(decode_image(longer, 3, "a.gif").pixels == expected);
    // A frame reaching past the screen is cut to it.
    const GifFrame over{.left = 2, .top = 0, .width = 2, .height = 2, .indices = {1, 1, 2, 2}};
    CHECK(decode_image(gif_file(3, 2, kSix, {over}), 3, "a.gif").pixels ==
          Bytes{0, 0, 0, 0, 0, 0, 0, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255});
    // A frame wider than any image tensorctl reads (kMaxImageSide) is still cut to the screen, as TensorFlow
    // cuts it; its interlaced third row, below the screen, is read past.
    GifFrame wide{.left = 0, .top = 0, .width = 40000, .height = 3, .interlace = true};
    wide.indices.assign(3 * 40000, 0);
    for (int x = 0; x < 3; ++x) wide.indices[40000 + x] = static_cast<std::uint8_t>(x + 1);
    for (int x = 0; x < 3; ++x) wide.indices[2 * 40000 + x] = 5;
    CHECK(decode_image(gif_file(3, 2, kSix, {wide}), 3, "a.gif").pixels ==
          Bytes{255, 0, 0, 255, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255});
  }

  TEST_CASE("GIF: an interlaced frame reads as the same frame stored in order; an animation as its first") {
    // 11 rows touch all four passes (rows 0 and 8; 4; 2, 6 and 10; the odd ones).
    GifFrame frame{.width = 2, .height = 11};
    for (int i = 0; i < 22; ++i) frame.indices.push_back(static_cast<std::uint8_t>(i % 6));
    const DecodedImage plain = decode_image(gif_file(2, 11, kSix, {frame}), 3, "a.gif");
    frame.interlace = true;
    const DecodedImage interlaced = decode_image(gif_file(2, 11, kSix, {frame}), 3, "b.gif");
    CHECK(interlaced.pixels == plain.pixels);
    CHECK(Bytes(plain.pixels.begin() + 3 * 20, plain.pixels.end()) ==
          Bytes{0, 0, 255, 255, 255, 255});  // 20 % 6, 21 % 6
    GifFrame second = frame;
    std::fill(second.indices.begin(), second.indices.end(), 5);
    CHECK(decode_image(gif_file(2, 11, kSix, {frame, second}), 3, "a.gif").pixels == plain.pixels);
  }

  TEST_CASE("GIF: truncated, frameless, paletteless and damaged files refused naming the file") {
    const GifFrame frame{.width = 3, .height = 2, .indices = {0, 1, 2, 3, 4, 5}};
    const std::string good = gif_file(3, 2, kSix, {frame});
    check_refused(good.substr(0, good.size() - 6), "a GIF file giflib cannot read: ");
    check_refused(good.substr(0, 10), "a GIF file giflib cannot read: ");
    check_refused(gif_file(3, 2, kSix, {}), "a GIF file without a frame");
    check_refused(with_global_palette_cut(good, 0), "a damaged GIF file: its first frame has no palette");
    check_refused(with_global_palette_cut(good, 2), "a damaged GIF file: colour 4 of a palette of 4 at pixel (1, 1)");
    CHECK(decode_image(with_global_palette_cut(good, 3), 3, "a.gif").pixels == kSix);
    check_refused(gif_file(3, 0, kSix, {}), "an image of 3 x 0 pixels");
  }

  TEST_CASE("looks_like_image: a BMP by its header's size, so a CSV of a BMI column is none; a GIF by its stamp") {
    CHECK(looks_like_bmp(bmp_file({.width = 1, .height = 1, .bits = 24, .samples = {1, 2, 3}})));
    CHECK(looks_like_bmp(bmp_file({.width = 1, .height = 1, .bits = 24, .samples = {1, 2, 3}, .os2 = true})));
    CHECK_FALSE(looks_like_image("BMI,age,label\n22.5,31,1\n"));
    CHECK_FALSE(looks_like_image("BM"));
    CHECK(looks_like_gif("GIF87a...."));
    CHECK_FALSE(looks_like_image("GIF,label\n1,0\n"));
    testing::check_spec_error([] { decode_image("BMI,age,label\n22.5,31,1\n", 3, "x.csv"); }, "x.csv", "",
                              {"a damaged BMP file: no header of a known size"});
  }

  TEST_CASE("a class folder lists .bmp and .gif files in any case, and loads them as decode_image reads them") {
    namespace fs = std::filesystem;
    const fs::path root = fs::temp_directory_path() / ("tctl_image_formats_" + std::to_string(::getpid()));
    fs::create_directories(root / "a");
    fs::create_directories(root / "b");
    const std::string bmp = bmp_file({.width = 3, .height = 2, .bits = 24, .samples = kSix});
    const std::string gif = gif_file(3, 2, kSix, {GifFrame{.width = 3, .height = 2, .indices = {5, 4, 3, 2, 1, 0}}});
    std::ofstream(root / "a" / "one.BMP", std::ios::binary) << bmp;
    std::ofstream(root / "b" / "two.Gif", std::ios::binary) << gif;
    std::ofstream(root / "b" / "notes.txt") << "skipped";
    const ImageFolder folder = list_image_folder(root.string(), "c.json", "data.images.directory");
    REQUIRE(folder.paths.size() == 2);
    CHECK(folder.labels == std::vector<std::int32_t>{0, 1});
    const Tensor x = load_images(folder.paths, ImageOptions{.height = 2, .width = 3, .channels = 3}, 2);
    const DecodedImage second = decode_image(gif, 3, "two.Gif");
    for (std::size_t i = 0; i < kSix.size(); ++i) {
      CHECK(x.data<float>()[i] == static_cast<float>(kSix[i]));
      CHECK(x.data<float>()[kSix.size() + i] == static_cast<float>(second.pixels[i]));
    }
    std::error_code ec;
    fs::remove_all(root, ec);
  }
}

}  // namespace tctl
