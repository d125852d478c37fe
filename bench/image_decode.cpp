// Image decoding as a run's data path does it (models/data/images.h): PNG, JPEG, BMP and GIF files of
// 256 x 256 RGB pixels decoded (libpng, libjpeg-turbo, our BMP reader, giflib), and decoded and resized to
// 224 x 224 (bilinear), on 1 and 2 worker threads. Prints images per second, best of 3 passes;
// bench/image_decode.sh runs Pillow on the same files.
//
// Usage: bench_image_decode [DIR [COUNT]]   default /tmp/tctl_image_bench, 300 files of each format. A
// format's folder of DIR is filled first when it holds no images: smooth colour gradients with noise, so that
// no format compresses them to nothing (PNG level 6 as libpng's simplified API writes, JPEG quality 90, BMP
// 24-bit, GIF through a 6 x 6 x 6 colour cube).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "models/data/images.h"
#include "tests/image_files.h"

using namespace tctl;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> picture(int side, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> p(static_cast<std::size_t>(side * side * 3));
  for (int y = 0; y < side; ++y)
    for (int x = 0; x < side; ++x)
      for (int c = 0; c < 3; ++c) {
        const int v = (x * (c + 1) + y * (3 - c)) / 3 + static_cast<int>(rng() % 24);
        p[static_cast<std::size_t>((y * side + x) * 3 + c)] = static_cast<std::uint8_t>(v & 0xff);
      }
  return p;
}

// `p` (RGB) as a GIF through the 216 colours of a 6 x 6 x 6 cube.
std::string cube_gif(const std::vector<std::uint8_t>& p, int side) {
  std::vector<std::uint8_t> palette;
  for (int r = 0; r < 6; ++r)
    for (int g = 0; g < 6; ++g)
      for (int b = 0; b < 6; ++b)
        palette.insert(palette.end(), {static_cast<std::uint8_t>(51 * r), static_cast<std::uint8_t>(51 * g),
                                       static_cast<std::uint8_t>(51 * b)});
  testing::GifFrame frame{.width = side, .height = side};
  for (std::size_t i = 0; i < p.size(); i += 3)
    frame.indices.push_back(
        static_cast<std::uint8_t>(p[i] * 6 / 256 * 36 + p[i + 1] * 6 / 256 * 6 + p[i + 2] * 6 / 256));
  return testing::gif_file(side, side, palette, {frame});
}

const std::vector<std::string> kFormats{"png", "jpeg", "bmp", "gif"};

void fill(const fs::path& dir, int count) {
  for (const std::string& format : kFormats) {
    if (!list_images((dir / format).string()).empty()) continue;
    fs::create_directories(dir / format);
    for (int i = 0; i < count; ++i) {
      const std::vector<std::uint8_t> p = picture(256, static_cast<std::uint32_t>(i));
      const std::string bytes = format == "png"    ? testing::png_file(256, 256, PNG_FORMAT_RGB, p)
                                : format == "jpeg" ? testing::jpeg_file(256, 256, 3, p, 90)
                                : format == "bmp"
                                    ? testing::bmp_file({.width = 256, .height = 256, .bits = 24, .samples = p})
                                    : cube_gif(p, 256);
      std::ofstream(dir / format / fmt::format("{:04d}.{}", i, format == "jpeg" ? "jpg" : format), std::ios::binary)
          << bytes;
    }
  }
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class F>
double best_rate(std::size_t images, F&& pass) {
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    best = std::min(best, bench::seconds_since(start));
  }
  return static_cast<double>(images) / best;
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = argc > 1 ? argv[1] : "/tmp/tctl_image_bench";
  const int count = argc > 2 ? std::stoi(argv[2]) : 300;
  fill(dir, count);
  fmt::print("tensorctl (libpng {}, libjpeg-turbo, giflib {}.{}.{}): 256 x 256 RGB files, images/s, best of 3\n",
             PNG_LIBPNG_VER_STRING, GIFLIB_MAJOR, GIFLIB_MINOR, GIFLIB_RELEASE);
  fmt::print("{:>6} {:>14} {:>22} {:>22}\n", "format", "decode 1 thr", "decode+resize 1 thr", "decode+resize 2 thr");
  const ImageOptions resize{.height = 224, .width = 224, .channels = 3, .interpolation = ImageInterpolation::kBilinear};
  for (const std::string& format : kFormats) {
    const std::vector<std::string> paths = list_images((dir / format).string());
    std::vector<std::string> bytes;
    for (const auto& p : paths) bytes.push_back(read(p));  // decode alone: from memory
    const double decode = best_rate(paths.size(), [&] {
      for (std::size_t i = 0; i < bytes.size(); ++i) (void)decode_image(bytes[i], 3, paths[i]);
    });
    const double one = best_rate(paths.size(), [&] { (void)load_images(paths, resize, 1); });
    const double two = best_rate(paths.size(), [&] { (void)load_images(paths, resize, 2); });
    fmt::print("{:>6} {:>14.0f} {:>22.0f} {:>22.0f}\n", format, decode, one, two);
  }
  return 0;
}
