// TensorBoard event files: CRC-32C against published check values, records and Events decoded by the
// tests' own reader (tests/event_records.h).
#include "models/io/event_file.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "event_records.h"
#include "models/test_files.h"

namespace tctl {

TEST_CASE("crc32c gives the published check values, and the mask is TFRecord's") {
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);  // RFC 3720, B.4
  CHECK(crc32c(std::string(32, '\xFF')) == 0x62A8AB43u);
  CHECK(crc32c("") == 0u);
  const std::string text = "the quick brown fox";
  CHECK(crc32c(text) == testing::plain_crc32c(text));
  CHECK(masked_crc32c(text) == testing::plain_masked_crc(text));
}

TEST_CASE("event records decode to the wall time, step, version and scalars written") {
  const std::string bytes = tf_record(event_file_version(1.5)) +
                            tf_record(event_scalars(2.25, 300, {{"epoch_loss", 0.125f}, {"epoch_accuracy", 0.75f}}));
  const auto events = testing::read_event_records(bytes);
  REQUIRE(events.size() == 2);
  CHECK(events[0].wall_time == 1.5);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[1].step == 300);
  CHECK(events[1].wall_time == 2.25);
  CHECK(events[1].scalars == std::map<std::string, float>{{"epoch_loss", 0.125f}, {"epoch_accuracy", 0.75f}});
  // A flipped bit is caught by the CRC.
  std::string broken = bytes;
  broken[bytes.size() - 6] ^= 1;
  CHECK_THROWS(testing::read_event_records(broken));
}

TEST_CASE("EventFileWriter names its file like TensorFlow's and appends whole records") {
  const auto dir = testing::scratch_dir() / "events" / "train";
  std::filesystem::remove_all(dir);
  std::filesystem::path path;
  {
    EventFileWriter w(dir);
    path = w.path();
    w.append({event_scalars(1.0, 1, {{"epoch_loss", 2.0f}}), event_scalars(1.0, 2, {{"epoch_loss", 1.0f}})});
  }
  CHECK(path.parent_path() == dir);
  CHECK(path.filename().string().starts_with("events.out.tfevents."));
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto events = testing::read_event_records(bytes);
  REQUIRE(events.size() == 3);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[2].step == 2);
  CHECK(events[2].scalars.at("epoch_loss") == 1.0f);
  // A second writer in the same folder makes a file of its own.
  EventFileWriter other(dir);
  CHECK(other.path() != path);
}

}  // namespace tctl
