// Image decoding as a run's data path does it (models/data/images.h): PNG and JPEG files of 256 x 256 RGB
// pixels decoded (libpng, libjpeg-turbo), and decoded and resized to 224 x 224 (bilinear), on 1 and 2 worker
// threads. Prints images per second, best of 3 passes; bench/image_decode.sh runs Pillow on the same files.
//
// Usage: bench_image_decode [DIR [COUNT]]   default /tmp/tctl_image_bench, 300 files of each format. DIR
// is filled first when it holds no images: smooth colour gradients with noise, so that neither format
// compresses them to nothing (PNG level 6 as libpng's simplified API writes, JPEG quality 90).
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

void fill(const fs::path& dir, int count) {
  fs::create_directories(dir / "png");
  fs::create_directories(dir / "jpeg");
  for (int i = 0; i < count; ++i) {
    const std::vector<std::uint8_t> p = picture(256, static_cast<std::uint32_t>(i));
    std::ofstream(dir / "png" / fmt::format("{:04d}.png", i), std::ios::binary)
        << testing::png_file(256, 256, PNG_FORMAT_RGB, p);
    std::ofstream(dir / "jpeg" / fmt::format("{:04d}.jpg", i), std::ios::binary)
        << testing::jpeg_file(256, 256, 3, p, 90);
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
  if (list_images(dir.string()).empty()) fill(dir, count);
  fmt::print("tensorctl (libpng {}, libjpeg-turbo): 256 x 256 RGB files, images/s, best of 3\n", PNG_LIBPNG_VER_STRING);
  fmt::print("{:>6} {:>14} {:>22} {:>22}\n", "format", "decode 1 thr", "decode+resize 1 thr", "decode+resize 2 thr");
  const ImageOptions resize{.height = 224, .width = 224, .channels = 3, .interpolation = ImageInterpolation::kBilinear};
  for (const char* format : {"png", "jpeg"}) {
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
