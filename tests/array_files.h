// Array files for the tests, byte for byte as their writers lay them out: .npy as NumPy 1.x writes it, IDX as
// MNIST's files are (models/data/arrays.h reads both).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tctl::testing {

// A .npy file as NumPy 1.x writes it: the preamble, the header dict padded with spaces to a multiple of 64
// bytes and ended by a newline, then the elements' bytes.
inline std::string npy(const std::string& descr, const std::string& shape, const std::string& data, int major = 1,
                       const std::string& fortran = "False") {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  const std::size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t n = dict.size();
  for (std::size_t k = 0; k < (major == 1 ? 2u : 4u); ++k) out += static_cast<char>((n >> (8 * k)) & 0xff);
  return out + dict + data;
}

template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// An IDX file: type byte, dimensions big-endian, then the big-endian elements given as bytes.
inline std::string idx(unsigned char type, const std::vector<std::uint32_t>& dims, const std::string& data) {
  std::string out{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (std::uint32_t d : dims)
    for (int b = 3; b >= 0; --b) out += static_cast<char>((d >> (8 * b)) & 0xff);
  return out + data;
}

}  // namespace tctl::testing
