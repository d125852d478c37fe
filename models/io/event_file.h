// TensorBoard's event files: records of TFRecord framing holding Event protocol buffers, the format that
// tf.summary writes and TensorBoard reads (`events.out.tfevents.*`). Only what scalar summaries need.
//
// A record is: the data's length as a little-endian uint64, the masked CRC-32C of those 8 bytes, the data,
// and the masked CRC-32C of the data. An Event (tensorflow/core/util/event.proto) is wall_time (field 1,
// double), step (2, int64), and either file_version (3, string; "brain.Event:2" in a file's first record) or a
// summary (5, Summary). A Summary is repeated values (1); a Value is a tag (1, string) and a simple_value (2,
// float). The encoding is the protocol buffers wire format for these few fields.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tctl {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`: crc32c("123456789") = 0xE3069283.
std::uint32_t crc32c(std::string_view data);
// TFRecord's mask, so that a CRC stored inside checksummed data does not checksum to a constant.
std::uint32_t masked_crc32c(std::string_view data);

// One TFRecord: framing around `data`.
std::string tf_record(std::string_view data);

// Encoded Event messages.
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, std::int64_t step,
                          const std::vector<std::pair<std::string, float>>& values);

// Appends records to one event file. Each append is one write(2) of whole records to a file opened with
// O_APPEND, so a reader (TensorBoard polls while training runs) never sees a record cut by another writer,
// and a process killed in between leaves only whole records. Not thread-safe.
class EventFileWriter {
 public:
  // Creates `dir` (and its parents) and a new file in it named like TensorFlow's:
  // events.out.tfevents.<seconds>.<host>.<pid>.<n>.tensorctl, whose first record is the file version.
  // Throws RuntimeError naming the path when it cannot.
  explicit EventFileWriter(const std::filesystem::path& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends `events` (encoded Events), each framed as a record, in one write.
  void append(const std::vector<std::string>& events);
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace tctl
