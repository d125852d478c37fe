#include "models/data/zip_archive.h"

#include <algorithm>

#include <fmt/format.h>
#include <zip.h>

#include "core/errors.h"

namespace tctl {

namespace {

zip_t* archive(void* p) { return static_cast<zip_t*>(p); }

std::string error_text(zip_error_t* error) {
  std::string text = zip_error_strerror(error);
  zip_error_fini(error);
  return text;
}

}  // namespace

bool looks_like_zip(std::string_view bytes) {
  return bytes.starts_with(std::string_view("PK\x03\x04", 4)) || bytes.starts_with(std::string_view("PK\x05\x06", 4));
}

ZipArchive::ZipArchive(std::string_view bytes, std::string file) : file_(std::move(file)) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (source == nullptr) throw SpecError(file_, "", "cannot read the zip archive: " + error_text(&error));
  // ZIP_CHECKCONS: the directory must agree with the local headers, so a forged directory is refused here.
  zip_ = zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (zip_ == nullptr) {
    zip_source_free(source);
    throw SpecError(file_, "", "not a zip archive libzip can read: " + error_text(&error));
  }
  list_members();
}

ZipArchive::ZipArchive(const std::string& path) : file_(path) {
  int code = 0;
  zip_ = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code);
  if (zip_ == nullptr) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    throw SpecError(file_, "", "not a zip archive libzip can read: " + error_text(&error));
  }
  list_members();
}

void ZipArchive::list_members() {
  const zip_int64_t n = zip_get_num_entries(archive(zip_), 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(archive(zip_), static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW);
    names_.emplace_back(name != nullptr ? name : "");
  }
}

ZipArchive::~ZipArchive() {
  if (zip_ != nullptr) zip_discard(archive(zip_));
}

bool ZipArchive::contains(const std::string& name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

std::string ZipArchive::read(const std::string& name, std::size_t limit) const {
  const zip_int64_t index = zip_name_locate(archive(zip_), name.c_str(), ZIP_FL_ENC_RAW);
  if (index < 0) throw SpecError(file_, name, "no such member in the archive");
  zip_file_t* member = zip_fopen_index(archive(zip_), static_cast<zip_uint64_t>(index), 0);
  if (member == nullptr)
    throw SpecError(file_, name, std::string("cannot open the member: ") + zip_strerror(archive(zip_)));
  std::string out;
  char chunk[1 << 16];
  for (;;) {
    const zip_int64_t got = zip_fread(member, chunk, sizeof chunk);
    if (got < 0) {
      const std::string why = zip_file_strerror(member);
      zip_fclose(member);
      throw SpecError(file_, name, "a damaged member: " + why);
    }
    if (got == 0) break;
    if (out.size() + static_cast<std::size_t>(got) > limit) {
      zip_fclose(member);
      throw SpecError(file_, name, fmt::format("the member holds more than the {} bytes read from it", limit));
    }
    out.append(chunk, static_cast<std::size_t>(got));
  }
  if (zip_fclose(member) != 0) throw SpecError(file_, name, "a damaged member (its checksum differs)");
  return out;
}

}  // namespace tctl
