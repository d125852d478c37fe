// Image files for the tests, written with the libraries tensorctl reads them with (libpng's simplified write
// API, libjpeg-turbo), so a test can make PNG and JPEG files of any size and colour type in memory.
#pragma once

#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <png.h>

namespace tctl::testing {

// A PNG of `width` x `height` pixels of `format` (PNG_FORMAT_GRAY, _GA, _RGB, _RGBA; `pixels` row-major).
inline std::string png_file(int width, int height, png_uint_32 format, const std::vector<std::uint8_t>& pixels) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = format;
  png_alloc_size_t size = 0;
  if (png_image_write_get_memory_size(image, size, 0, pixels.data(), 0, nullptr) == 0)
    throw std::runtime_error(std::string("png_file: ") + image.message);
  std::string out(size, '\0');
  if (png_image_write_to_memory(&image, out.data(), &size, 0, pixels.data(), 0, nullptr) == 0)
    throw std::runtime_error(std::string("png_file: ") + image.message);
  out.resize(size);
  return out;
}

// A baseline JPEG of 1 (gray) or 3 (RGB) `components` at `quality`.
inline std::string jpeg_file(int width, int height, int components, const std::vector<std::uint8_t>& pixels,
                             int quality = 95) {
  jpeg_compress_struct info;
  jpeg_error_mgr error;
  info.err = jpeg_std_error(&error);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = static_cast<JDIMENSION>(width);
  info.image_height = static_cast<JDIMENSION>(height);
  info.input_components = components;
  info.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    auto* row = const_cast<JSAMPLE*>(pixels.data() + static_cast<std::size_t>(info.next_scanline) * width * components);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  std::string out(reinterpret_cast<const char*>(buffer), size);
  jpeg_destroy_compress(&info);
  std::free(buffer);
  return out;
}

// `width` x `height` pixels of `channels` channels, every one `value`.
inline std::vector<std::uint8_t> solid(int width, int height, std::vector<std::uint8_t> value) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(width * height) * value.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = value[i % value.size()];
  return out;
}

}  // namespace tctl::testing
