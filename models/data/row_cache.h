// A data set's rows parsed once into a binary file, for data that is read more than once or does not fit in
// memory (a streamed run, models/data/row_stream.h): epochs after the first, a resumed run, evaluate and other
// runs on the same data read floats (or texts) from it instead of parsing and decoding again.
//
// The file holds a 4 KiB header, the features (f32 [N, F], row-major, little-endian) or, for a CSV's text
// column, the texts one after another and where each ends (i64 [N]), the labels (i32 [N] class ids, or
// f32 [N, T] targets) and a JSON record of the names (features, classes, an image folder's files). It is written to a
// temporary name and renamed when whole, and its header, written last, records its size: a writer killed
// at any point leaves a temporary (removed by the next builder once its process is gone) and never a cache
// that is used. It is found by the key of the data it was built from (the source files' paths, sizes,
// modification times and inodes, and how they are read: a CSV's label column, header and whether the labels
// are classes; an image folder's size and colour mode), so a changed file is read again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/data/dataset.h"

namespace tctl {

class RowCache {
 public:
  // What writes a cache's rows, a block at a time: Source::write's target.
  class RowSink {
   public:
    // Appends `n` rows of the data's features (as many floats each as meta's feature names), row-major.
    virtual void add(const float* x, std::int64_t n) = 0;
    // Appends rows whose features are texts (a CSV's text column; meta has no feature names). Called with
    // none, it marks a data set of texts that may have no rows.
    virtual void add_texts(std::span<const std::string> texts) = 0;

   protected:
    ~RowSink() = default;
  };

  // What a cache is built from, whatever the reader: a CSV of numbers (csv_source), arrays (arrays.h) or a
  // folder of images (images.h).
  struct Source {
    std::string stem;      // names the cache file: the data file's or folder's name
    std::string identity;  // the data's files as they are now (paths, sizes, times) and how they are read;
                           // empty when they cannot be stat'ed (write then says why)
    // Gives every row to the sink, in the data's order, and sets `meta` as the reader sets an in-memory data
    // set but for x: name, feature names, labels (y for every row), class count and names, and paths. Throws
    // SpecError for bad data, as the in-memory reader does.
    std::function<void(RowSink& sink, Dataset& meta)> write;
  };

  // A CSV file of numbers and how its labels are read.
  struct CsvSource {
    std::string path;
    std::string label_column;
    bool classification = true;
    CsvDataOptions options;
    std::string file_for_errors, where;  // where the config names the file, for a missing label column
  };
  // The CSV read as load_csv_dataset reads it, a block at a time (read_csv_blocks).
  static Source csv_source(const CsvSource& csv);

  // A file as it is now, for a Source's identity: its absolute path, size, inode and modification time, a
  // line each; empty when it cannot be stat'ed.
  static std::string file_identity(const std::string& path);
  // The key of `source` as its files are now: 0 when they cannot be stat'ed.
  static std::uint64_t key_of(const Source& source);
  // "<dir>/<stem>-<16 hex digits of the key>.rows": where the cache of `source` lives in `dir`.
  static std::filesystem::path path_in(const std::filesystem::path& dir, const Source& source, std::uint64_t key);

  // The cache at `path` when it is whole and was built with `key`; null otherwise (no file, another key, a
  // file cut short or not a cache).
  static std::shared_ptr<const RowCache> open(const std::filesystem::path& path, std::uint64_t key);
  // Writes `source` a block at a time into a new cache at `path` (replacing any), opens it, and removes the
  // caches of the data's earlier versions beside it ("<stem>-*.rows"). Throws SpecError for bad data (as the
  // in-memory readers), RuntimeError when the file cannot be written; the temporary is removed then.
  static std::shared_ptr<const RowCache> build(const std::filesystem::path& path, std::uint64_t key,
                                               const Source& source);

  ~RowCache();
  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  std::int64_t rows() const { return rows_; }
  std::int64_t features() const { return features_; }
  const std::filesystem::path& path() const { return path_; }
  // The data set without its features: labels (every row's), names and class count; x is f32 [0, F].
  const Dataset& metadata() const { return meta_; }
  const DataFingerprint& fingerprint() const { return fingerprint_; }
  // The features of `rows` (indices in [0, rows()), any order, repeats allowed) into consecutive rows of
  // `out`, which holds rows.size() x features() floats. Reads the file in large ordered pieces whatever the
  // order asked for. Thread-safe. Throws RuntimeError when the file cannot be read.
  void read_rows(std::span<const std::int64_t> rows, float* out) const;
  // Whether the rows are texts (a CSV's text column: features() is 0), and the texts of `rows` (as read_rows
  // takes them) into `out`, replacing what it held.
  bool has_texts() const { return text_ends_.has_value(); }
  void read_texts(std::span<const std::int64_t> rows, std::vector<std::string>& out) const;
  // The texts' bytes in all, for a window's size.
  std::int64_t text_bytes() const { return has_texts() && rows_ > 0 ? text_ends_->back() : 0; }

 private:
  RowCache() = default;
  int fd_ = -1;
  std::filesystem::path path_;
  std::int64_t rows_ = 0, features_ = 0;
  Dataset meta_;
  DataFingerprint fingerprint_;
  std::optional<std::vector<std::int64_t>> text_ends_;  // where each row's text ends, for data of texts
};

}  // namespace tctl
