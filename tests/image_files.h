// Image files for the tests, written with the libraries tensorctl reads them with (libpng's simplified write
// API, libjpeg-turbo, giflib), or by hand for BMP, so a test can make PNG, JPEG, GIF and BMP files of any size
// and colour type in memory.
#pragma once

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <gif_lib.h>
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

// A BMP, written by hand: `samples` are RGB (24 bits), RGBA (32) or palette indices (8), the top row first,
// stored bottom-up unless `top_down`; `palette` RGB triples. `os2` writes OS/2's 12-byte header (3-byte
// palette entries) instead of Windows' 40-byte one.
struct BmpSpec {
  int width = 1, height = 1, bits = 24;
  std::vector<std::uint8_t> samples;
  std::vector<std::uint8_t> palette;
  bool top_down = false;
  bool os2 = false;
};

inline std::string bmp_file(const BmpSpec& s) {
  const std::size_t header = s.os2 ? 12 : 40, entry = s.os2 ? 3 : 4, colours = s.palette.size() / 3;
  const std::size_t offset = 14 + header + colours * entry;
  const std::size_t row = static_cast<std::size_t>((s.width * s.bits + 31) / 32 * 4);
  std::string out(offset + row * static_cast<std::size_t>(s.height), '\0');
  auto put = [&out](std::size_t at, std::uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  out[0] = 'B';
  out[1] = 'M';
  put(2, static_cast<std::uint32_t>(out.size()), 4);
  put(10, static_cast<std::uint32_t>(offset), 4);
  put(14, static_cast<std::uint32_t>(header), 4);
  if (s.os2) {
    put(18, static_cast<std::uint32_t>(s.width), 2);
    put(20, static_cast<std::uint32_t>(s.height), 2);
    put(22, 1, 2);
    put(24, static_cast<std::uint32_t>(s.bits), 2);
  } else {
    put(18, static_cast<std::uint32_t>(s.width), 4);
    put(22, static_cast<std::uint32_t>(s.top_down ? -s.height : s.height), 4);
    put(26, 1, 2);
    put(28, static_cast<std::uint32_t>(s.bits), 2);
    put(46, static_cast<std::uint32_t>(colours), 4);
  }
  for (std::size_t c = 0; c < colours; ++c)
    for (std::size_t k = 0; k < 3; ++k) out[14 + header + c * entry + k] = static_cast<char>(s.palette[3 * c + 2 - k]);
  const int per = s.bits / 8;
  for (int y = 0; y < s.height; ++y) {
    const std::size_t stored = static_cast<std::size_t>(s.top_down ? y : s.height - 1 - y);
    for (int x = 0; x < s.width; ++x) {
      const std::uint8_t* in = s.samples.data() + (static_cast<std::size_t>(y) * s.width + x) * per;
      char* px = out.data() + offset + stored * row + static_cast<std::size_t>(x * per);
      if (per == 1) {
        px[0] = static_cast<char>(in[0]);
        continue;
      }
      px[0] = static_cast<char>(in[2]);  // BGR(A)
      px[1] = static_cast<char>(in[1]);
      px[2] = static_cast<char>(in[0]);
      if (per == 4) px[3] = static_cast<char>(in[3]);
    }
  }
  return out;
}

// One frame of a GIF: its place on the screen, its colour indices (row-major, top row first), its own palette
// (RGB triples; none: the global one), whether it is stored interlaced, and its transparent index (-1: none).
struct GifFrame {
  int left = 0, top = 0, width = 1, height = 1;
  std::vector<std::uint8_t> indices;
  std::vector<std::uint8_t> palette;
  bool interlace = false;
  int transparent = -1;
};

// A palette for giflib: `rgb` triples, padded with black to a power of two entries.
inline ColorMapObject* gif_palette(const std::vector<std::uint8_t>& rgb) {
  int count = 2;
  while (count < static_cast<int>(rgb.size() / 3)) count *= 2;
  std::vector<GifColorType> colours(static_cast<std::size_t>(count), GifColorType{0, 0, 0});
  for (std::size_t c = 0; c < rgb.size() / 3; ++c) colours[c] = {rgb[3 * c], rgb[3 * c + 1], rgb[3 * c + 2]};
  return GifMakeMapObject(count, colours.data());
}

// A GIF89a of a `width` x `height` screen and `frames`, written with giflib.
inline std::string gif_file(int width, int height, const std::vector<std::uint8_t>& global_palette,
                            const std::vector<GifFrame>& frames) {
  std::string out;
  int error = 0;
  GifFileType* gif = EGifOpen(
      &out,
      [](GifFileType* g, const GifByteType* bytes, int n) {
        static_cast<std::string*>(g->UserData)
            ->append(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(n));
        return n;
      },
      &error);
  if (gif == nullptr) throw std::runtime_error("gif_file: EGifOpen failed");
  EGifSetGifVersion(gif, true);
  ColorMapObject* global = global_palette.empty() ? nullptr : gif_palette(global_palette);
  bool ok = EGifPutScreenDesc(gif, width, height, 8, 0, global) == GIF_OK;
  for (const GifFrame& f : frames) {
    if (f.transparent >= 0) {
      GraphicsControlBlock control{DISPOSAL_UNSPECIFIED, false, 0, f.transparent};
      GifByteType block[4];
      const std::size_t n = EGifGCBToExtension(&control, block);
      ok = ok && EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, static_cast<int>(n), block) == GIF_OK;
    }
    ColorMapObject* local = f.palette.empty() ? nullptr : gif_palette(f.palette);
    ok = ok && EGifPutImageDesc(gif, f.left, f.top, f.width, f.height, f.interlace, local) == GIF_OK;
    GifFreeMapObject(local);
    std::vector<int> rows;
    if (f.interlace) {
      for (auto [start, step] : {std::pair{0, 8}, {4, 8}, {2, 4}, {1, 2}})
        for (int y = start; y < f.height; y += step) rows.push_back(y);
    } else {
      for (int y = 0; y < f.height; ++y) rows.push_back(y);
    }
    for (int y : rows) {
      std::vector<GifPixelType> line(f.indices.begin() + static_cast<std::ptrdiff_t>(y) * f.width,
                                     f.indices.begin() + static_cast<std::ptrdiff_t>(y + 1) * f.width);
      ok = ok && EGifPutLine(gif, line.data(), f.width) == GIF_OK;
    }
  }
  GifFreeMapObject(global);
  ok = EGifCloseFile(gif, &error) == GIF_OK && ok;
  if (!ok) throw std::runtime_error("gif_file: giflib could not write the file");
  return out;
}

}  // namespace tctl::testing
