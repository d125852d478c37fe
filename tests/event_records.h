// A reader of TensorBoard event files for the tests, written from the format's description and independent
// of models/io/event_file.cpp: it checks each record's two CRCs and decodes the few Event fields we write.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tctl::testing {

struct DecodedEvent {
  double wall_time = 0.0;
  std::int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;  // tag -> simple_value
};

// CRC-32C computed bit by bit, the slowest and plainest way.
inline std::uint32_t plain_crc32c(std::string_view data) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline std::uint32_t plain_masked_crc(std::string_view data) {
  const std::uint32_t crc = plain_crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

class WireReader {
 public:
  explicit WireReader(std::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(take(1)[0]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw std::runtime_error("varint too long");
  }
  std::string_view take(std::size_t n) {
    if (pos_ + n > data_.size()) throw std::runtime_error("truncated message");
    std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  template <class T>
  T fixed() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
};

inline DecodedEvent decode_event(std::string_view data) {
  DecodedEvent e;
  WireReader r(data);
  while (!r.done()) {
    const std::uint64_t tag = r.varint();
    const int field = static_cast<int>(tag >> 3), type = static_cast<int>(tag & 7);
    if (field == 1 && type == 1) {
      e.wall_time = r.fixed<double>();
    } else if (field == 2 && type == 0) {
      e.step = static_cast<std::int64_t>(r.varint());
    } else if (field == 3 && type == 2) {
      e.file_version = std::string(r.take(r.varint()));
    } else if (field == 5 && type == 2) {
      WireReader summary(r.take(r.varint()));
      while (!summary.done()) {
        if (summary.varint() != (1 << 3 | 2)) throw std::runtime_error("unexpected Summary field");
        WireReader value(summary.take(summary.varint()));
        std::string name;
        float v = 0.0f;
        while (!value.done()) {
          const std::uint64_t vt = value.varint();
          if (vt == (1 << 3 | 2))
            name = std::string(value.take(value.varint()));
          else if (vt == (2 << 3 | 5))
            v = value.fixed<float>();
          else
            throw std::runtime_error("unexpected Value field");
        }
        e.scalars[name] = v;
      }
    } else {
      throw std::runtime_error("unexpected Event field " + std::to_string(field));
    }
  }
  return e;
}

// Every record of an event file's bytes, CRCs checked (a mismatch throws).
inline std::vector<DecodedEvent> read_event_records(std::string_view bytes) {
  std::vector<DecodedEvent> out;
  WireReader r(bytes);
  while (!r.done()) {
    const std::string_view length_bytes = r.take(8);
    std::uint64_t length = 0;
    std::memcpy(&length, length_bytes.data(), 8);
    if (r.fixed<std::uint32_t>() != plain_masked_crc(length_bytes)) throw std::runtime_error("bad length CRC");
    const std::string_view data = r.take(length);
    if (r.fixed<std::uint32_t>() != plain_masked_crc(data)) throw std::runtime_error("bad data CRC");
    out.push_back(decode_event(data));
  }
  return out;
}

}  // namespace tctl::testing
