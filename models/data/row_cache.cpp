#include "models/data/row_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/fnv.h"
#include "core/text.h"
#include "models/data/csv.h"

namespace tctl {

namespace {

constexpr char kMagic[8] = {'T', 'C', 'T', 'L', 'R', 'O', 'W', 'S'};
constexpr std::int64_t kVersion = 3;  // 3: paths escaped (path_for_json)
constexpr std::int64_t kHeaderBytes = 4096;
// Reads and writes go in pieces of this many bytes: large enough for the disk to stream, small enough to be
// no memory to speak of beside a window.
constexpr std::size_t kIoBytes = std::size_t{8} << 20;

// A file's path for the cache's JSON record, which holds UTF-8 only: bytes that are not UTF-8 (a file named in
// Latin-1 in an image folder) and '%' itself as %XX, the rest as it is; path_from_json undoes it.
std::string path_for_json(std::string_view path) {
  std::string out;
  while (!path.empty()) {
    const std::size_t good = first_non_utf8(path).value_or(path.size());
    for (const char c : path.substr(0, good)) out += c == '%' ? std::string("%25") : std::string(1, c);
    if (good == path.size()) break;
    out += fmt::format("%{:02X}", static_cast<unsigned char>(path[good]));
    path.remove_prefix(good + 1);
  }
  return out;
}

// nullopt for a record no path_for_json wrote (a '%' without two hex digits after it).
std::optional<std::string> path_from_json(std::string_view text) {
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !hex(text[i + 1]) || !hex(text[i + 2])) return std::nullopt;
    out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  return out;
}

// The header's fields, in this order, each 8 bytes, little-endian (as every platform we build for stores them).
struct Header {
  char magic[8];
  std::int64_t version, rows, features, label_kind, key_bits, values_hash, columns_hash, meta_offset, meta_bytes,
      file_bytes, texts, text_bytes;  // texts: 1 when the rows are texts (features 0), their blob's size
};
static_assert(sizeof(Header) <= kHeaderBytes);
enum LabelKind : std::int64_t { kClassIds = 0, kTargets = 1 };

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const void* data, std::size_t n, std::int64_t at, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t got = ::pwrite(fd, p, n, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw RuntimeError(path + ": cannot write the data cache: " + errno_text());
    p += got;
    at += got;
    n -= static_cast<std::size_t>(got);
  }
}

void read_all(int fd, void* data, std::size_t n, std::int64_t at, const std::string& path) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw RuntimeError(path + ": cannot read the data cache: " + (got == 0 ? "cut short" : errno_text()));
    p += got;
    at += got;
    n -= static_cast<std::size_t>(got);
  }
}

// A file descriptor closed when it goes out of scope, and a temporary removed unless kept.
struct TemporaryFile {
  std::filesystem::path path;
  int fd = -1;
  bool keep = false;
  ~TemporaryFile() {
    if (fd >= 0) ::close(fd);
    std::error_code ec;
    if (!keep) std::filesystem::remove(path, ec);
  }
};

// Temporaries of `path` whose writer is gone (killed, say): "<name>.tmp.<pid>" with no process `pid`.
void remove_orphans(const std::filesystem::path& path) {
  std::error_code ec;
  const std::string prefix = path.filename().string() + ".tmp.";
  for (const auto& entry :
       std::filesystem::directory_iterator(path.parent_path().empty() ? "." : path.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) std::filesystem::remove(entry.path(), ec);
  }
}

// The caches beside `path` of the same file's other versions: "<stem>-<16 hex digits>.rows" but `path`.
void remove_other_versions(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  const std::size_t key_and_suffix = std::string_view("0123456789abcdef.rows").size();
  if (name.size() < key_and_suffix) return;
  const std::string stem = name.substr(0, name.size() - key_and_suffix);
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(path.parent_path().empty() ? "." : path.parent_path(), ec)) {
    const std::string other = entry.path().filename().string();
    if (other != name && other.size() == name.size() && other.starts_with(stem) && other.ends_with(".rows"))
      std::filesystem::remove(entry.path(), ec);
  }
}

// The labels of a CSV read a block at a time, decided at the end as load_csv_dataset decides them for the whole
// file: class ids when every label is a number (and no class names are given), else names. Each distinct label
// is kept once, with the first line it is on, for the messages.
class LabelCollector {
 public:
  LabelCollector(const RowCache::CsvSource& source, int label) : source_(source), label_(label) {}

  void add(const CsvTable& block) {
    const std::string& column = block.columns[static_cast<std::size_t>(label_)];
    for (std::int64_t r = 0; r < block.rows; ++r) {
      if (!source_.classification) {
        targets_.push_back(block.at(r, label_));
        continue;
      }
      const std::string& text = block.text_at(r, label_);
      auto [it, fresh] = index_.try_emplace(text, static_cast<std::int32_t>(labels_.size()));
      if (fresh) {
        if (labels_.size() > static_cast<std::size_t>(kMaxClasses))
          throw SpecError(
              source_.path, line(block, r),
              fmt::format("column {}: more than {} distinct class labels", quote_for_message(column), kMaxClasses));
        labels_.push_back({text, block.at(r, label_), block.row_lines[static_cast<std::size_t>(r)]});
      }
      ids_.push_back(it->second);
    }
  }

  // Sets meta's labels, class count and names; `column` is the label column's name.
  void finish(const std::string& column, Dataset& meta) {
    const auto n = static_cast<std::int64_t>(source_.classification ? ids_.size() : targets_.size());
    if (!source_.classification) {
      meta.y = Tensor::from_floats(Shape{n, 1}, targets_);
      return;
    }
    const bool all_numbers =
        std::all_of(labels_.begin(), labels_.end(), [](const Label& l) { return !std::isnan(l.value); });
    const CsvDataOptions& o = source_.options;
    std::vector<std::int32_t> value_of(labels_.size());
    if (o.named_labels && (!o.classes.empty() || !all_numbers)) {
      named(column, meta, value_of);
    } else {
      // The first line holding a label that is no class id, as the whole-file reader reports it.
      const Label* bad = nullptr;
      for (std::size_t i = 0; i < labels_.size(); ++i) {
        const float v = labels_[i].value;
        if (v >= 0.0f && v < static_cast<float>(kMaxClasses) && v == std::floor(v)) {
          value_of[i] = static_cast<std::int32_t>(v);
          meta.num_classes = std::max(meta.num_classes, value_of[i] + 1);
        } else if (bad == nullptr || labels_[i].line < bad->line) {
          bad = &labels_[i];
        }
      }
      if (bad != nullptr)
        throw SpecError(source_.path, "line " + std::to_string(bad->line),
                        fmt::format("column {}: class labels must be integers in 0..{}, got {}",
                                    quote_for_message(column), kMaxClasses - 1, quote_for_message(bad->text)));
    }
    meta.y = Tensor::empty(DType::kI32, Shape{n});
    auto* y = meta.y.mutable_data<std::int32_t>();
    for (std::int64_t r = 0; r < n; ++r) y[r] = value_of[static_cast<std::size_t>(ids_[static_cast<std::size_t>(r)])];
  }

 private:
  struct Label {
    std::string text;
    float value;  // NaN: not a number
    std::int64_t line;
  };
  std::string line(const CsvTable& block, std::int64_t r) const {
    return "line " + std::to_string(block.row_lines[static_cast<std::size_t>(r)]);
  }

  // Names: the given classes, or the sorted distinct labels; value_of[i] is label i's class.
  void named(const std::string& column, Dataset& meta, std::vector<std::int32_t>& value_of) const {
    for (const Label& l : labels_) {
      const std::string where = "line " + std::to_string(l.line);
      if (l.text.empty())
        throw SpecError(source_.path, where, "column " + quote_for_message(column) + ": empty class label");
      if (const auto bad = first_non_utf8(l.text))
        throw SpecError(source_.path, where,
                        not_utf8_message("column " + quote_for_message(column) + ": class name", l.text, *bad));
    }
    std::vector<std::string> names = source_.options.classes;
    if (names.empty()) {
      for (const Label& l : labels_) names.push_back(l.text);
      std::sort(names.begin(), names.end());
    }
    std::unordered_map<std::string, std::int32_t> position;
    for (std::size_t i = 0; i < names.size(); ++i) position.emplace(names[i], static_cast<std::int32_t>(i));
    const Label* unknown = nullptr;
    for (std::size_t i = 0; i < labels_.size(); ++i) {
      const auto it = position.find(labels_[i].text);
      if (it != position.end())
        value_of[i] = it->second;
      else if (unknown == nullptr || labels_[i].line < unknown->line)
        unknown = &labels_[i];
    }
    if (unknown != nullptr)
      throw SpecError(source_.path, "line " + std::to_string(unknown->line),
                      "column " + quote_for_message(column) + ": " + quote_for_message(unknown->text) +
                          " is not one of the run's " + std::to_string(names.size()) + " classes (" +
                          join_first(names) + ")");
    meta.num_classes = static_cast<int>(names.size());
    meta.class_names = std::move(names);
  }

  const RowCache::CsvSource& source_;
  int label_;
  std::unordered_map<std::string, std::int32_t> index_;
  std::vector<Label> labels_;
  std::vector<std::int32_t> ids_;
  std::vector<float> targets_;
};

// The CsvOptions that read `source` as load_csv_dataset reads it.
CsvOptions csv_options(const RowCache::CsvSource& source) {
  CsvOptions csv{.header = source.options.header, .threads = source.options.threads};
  if (source.classification) csv.text_columns.push_back(source.label_column);
  // A text data set reads two columns; the others may hold anything.
  if (!source.options.text_column.empty()) {
    csv.text_columns.push_back(source.options.text_column);
    csv.number_columns = {source.label_column};
  }
  return csv;
}

// The place of the text column among `columns`, checked as load_csv_dataset checks it.
int text_index(const std::vector<std::string>& columns, int label, const RowCache::CsvSource& source) {
  const std::string& name = source.options.text_column;
  const auto it = std::find(columns.begin(), columns.end(), name);
  if (it == columns.end())
    throw SpecError(source.file_for_errors, "data.text.column",
                    "no column \"" + name + "\" in " + source.path + " (columns: " + join(columns) + ")");
  if (it - columns.begin() == label)
    throw SpecError(source.file_for_errors, "data.text.column", "the text column cannot be the label column too");
  return static_cast<int>(it - columns.begin());
}

// The CSV parsed a block at a time, each block's features given to `sink`, the labels and names kept in `meta`.
void write_csv_rows(const RowCache::CsvSource& source, RowCache::RowSink& sink, Dataset& meta) {
  meta.name = std::filesystem::path(source.path).stem().string();
  const std::string& text_column = source.options.text_column;
  int label = -1, text = -1;
  std::optional<LabelCollector> labels;
  read_csv_blocks(
      source.path, csv_options(source),
      [&](const std::vector<std::string>& columns) {
        const auto it = std::find(columns.begin(), columns.end(), source.label_column);
        if (it == columns.end())
          throw SpecError(
              source.file_for_errors, source.where,
              "no column \"" + source.label_column + "\" in " + source.path + " (columns: " + join(columns) + ")");
        label = static_cast<int>(it - columns.begin());
        labels.emplace(source, label);
        if (!text_column.empty()) {
          text = text_index(columns, label, source);
          sink.add_texts({});  // a data set of texts, however many rows follow
          return;
        }
        if (columns.size() < 2)
          throw SpecError(
              source.file_for_errors, source.where,
              source.path + " has only the label column \"" + source.label_column + "\"; no features are left");
        for (const std::string& c : columns)
          if (c != source.label_column) meta.feature_names.push_back(c);
      },
      [&](CsvTable& block) {
        labels->add(block);
        if (text >= 0) {
          check_text_column_utf8(block, text, source.path);
          sink.add_texts(block.text[static_cast<std::size_t>(text)]);
          return;
        }
        // The label squeezed out of each row in place, as dataset_from_table does, then the rows written.
        float* cells = block.values.mutable_data<float>();
        squeeze_out_column(cells, block.rows, static_cast<std::int64_t>(block.columns.size()), label);
        sink.add(cells, block.rows);
      });
  labels->finish(source.label_column, meta);
}

// The rows written from kHeaderBytes on, in order; `at` is where the next goes.
class FileSink final : public RowCache::RowSink {
 public:
  FileSink(int fd, const std::string& where, const Dataset& meta) : fd_(fd), where_(where), meta_(meta) {}
  void add(const float* x, std::int64_t n) override {
    TCTL_CHECK(text_ends.empty(), "RowSink: rows of features after rows of text");
    const auto bytes = static_cast<std::size_t>(n) * meta_.feature_names.size() * sizeof(float);
    write_all(fd_, x, bytes, at, where_);
    at += static_cast<std::int64_t>(bytes);
    rows += n;
  }
  // Texts go where features would (a data set of texts has none), one after another; where each ends is kept.
  void add_texts(std::span<const std::string> texts) override {
    TCTL_CHECK(meta_.feature_names.empty() && static_cast<std::int64_t>(text_ends.size()) == rows,
               "RowSink: texts beside features");
    has_texts = true;
    std::string piece;
    for (const std::string& text : texts) {
      piece += text;
      text_ends.push_back(static_cast<std::int64_t>(text.size()) + (text_ends.empty() ? 0 : text_ends.back()));
    }
    write_all(fd_, piece.data(), piece.size(), at, where_);
    at += static_cast<std::int64_t>(piece.size());
    rows += static_cast<std::int64_t>(texts.size());
  }
  std::int64_t at = kHeaderBytes, rows = 0;
  std::vector<std::int64_t> text_ends;  // in the blob, each text's end
  bool has_texts = false;

 private:
  int fd_;
  const std::string& where_;
  const Dataset& meta_;  // its feature names are set before the first rows come
};

// The fingerprint the whole data set in memory would have (fingerprint_of): its features read back from the
// file a piece at a time, up to `end`, then its labels; or its texts, read back from the blob.
DataFingerprint fingerprint_of_file(int fd, const std::string& where, std::int64_t end, const Dataset& meta,
                                    const FileSink& sink) {
  std::vector<char> piece(kIoBytes);
  const bool texts = sink.has_texts;
  return fingerprint_of_parts(
      {.rows = sink.rows,
       .x_shape = Shape{sink.rows, static_cast<std::int64_t>(meta.feature_names.size())},
       .x_dtype = DType::kF32,
       .y_shape = meta.y.shape(),
       .y_dtype = meta.y.dtype(),
       .num_classes = meta.num_classes,
       .class_names = meta.class_names,
       .feature_names = meta.feature_names,
       .bytes =
           [&](FunctionRef<void(const void*, std::size_t)> add) {
             for (std::int64_t from = kHeaderBytes; from < end && !texts;) {
               const auto n = static_cast<std::size_t>(std::min<std::int64_t>(end - from, std::ssize(piece)));
               read_all(fd, piece.data(), n, from, where);
               add(piece.data(), n);
               from += static_cast<std::int64_t>(n);
             }
             add(meta.y.raw_data(), meta.y.bytes());
           },
       .texts =
           [&](FunctionRef<void(std::string_view)> add) {
             // A piece of the blob at a time, each text whole (a longer one read on its own).
             std::int64_t piece_from = 0, piece_to = 0;
             std::string longer;
             for (std::size_t r = 0; r < sink.text_ends.size(); ++r) {
               const std::int64_t from = r == 0 ? 0 : sink.text_ends[r - 1], to = sink.text_ends[r];
               if (to - from > std::ssize(piece)) {
                 longer.resize(static_cast<std::size_t>(to - from));
                 read_all(fd, longer.data(), longer.size(), kHeaderBytes + from, where);
                 add(longer);
                 continue;
               }
               if (to > piece_to) {
                 piece_from = from;
                 piece_to = std::min<std::int64_t>(sink.text_ends.back(), from + std::ssize(piece));
                 read_all(fd, piece.data(), static_cast<std::size_t>(piece_to - piece_from), kHeaderBytes + from,
                          where);
               }
               add(std::string_view(piece.data() + (from - piece_from), static_cast<std::size_t>(to - from)));
             }
           }});
}

}  // namespace

std::string RowCache::file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  std::error_code ec;
  return fmt::format("{}\n{}\n{}\n{}.{}\n", std::filesystem::absolute(path, ec).string(), st.st_size, st.st_ino,
                     st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

RowCache::Source RowCache::csv_source(const CsvSource& csv) {
  std::string identity = file_identity(csv.path);
  // Not the run's classes (evaluate's): the same file gives the same labels, which its caller checks.
  if (!identity.empty())
    identity = fmt::format("csv\n{}{}\n{}\n{}\n{}\n", identity, csv.label_column, csv.classification,
                           csv.options.header, csv.options.text_column);
  return {.stem = std::filesystem::path(csv.path).stem().string(),
          .identity = std::move(identity),
          .write = [csv](RowSink& sink, Dataset& meta) { write_csv_rows(csv, sink, meta); }};
}

std::uint64_t RowCache::key_of(const Source& source) {
  if (source.identity.empty()) return 0;
  return std::max<std::uint64_t>(fnv1a(fmt::format("v{}\n{}", kVersion, source.identity)), 1);
}

std::filesystem::path RowCache::path_in(const std::filesystem::path& dir, const Source& source, std::uint64_t key) {
  return dir / fmt::format("{}-{:016x}.rows", source.stem, key);
}

RowCache::~RowCache() {
  if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<const RowCache> RowCache::open(const std::filesystem::path& path, std::uint64_t key) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  // Windows are read in file order: a wider read-ahead.
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::shared_ptr<RowCache> cache(new RowCache());
  cache->fd_ = fd;
  cache->path_ = path;
  struct stat st {};
  Header h{};
  if (::fstat(fd, &st) != 0 || st.st_size < kHeaderBytes || ::pread(fd, &h, sizeof h, 0) != sizeof h) return nullptr;
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion ||
      static_cast<std::uint64_t>(h.key_bits) != key || h.file_bytes != st.st_size || h.rows < 0 || h.features < 0 ||
      h.meta_offset < kHeaderBytes || h.meta_bytes < 0 || h.meta_offset + h.meta_bytes != h.file_bytes)
    return nullptr;
  // Sizes the file could hold, so that the products below cannot overflow.
  if (h.rows > h.file_bytes || (h.features > 0 && h.rows > h.file_bytes / 4 / h.features)) return nullptr;
  if (h.texts != 0 &&
      (h.texts != 1 || h.features != 0 || h.text_bytes < 0 || h.text_bytes > h.file_bytes || h.rows > h.file_bytes / 8))
    return nullptr;
  try {
    std::string meta(static_cast<std::size_t>(h.meta_bytes), '\0');
    read_all(fd, meta.data(), meta.size(), h.meta_offset, path.string());
    const nlohmann::json j = nlohmann::json::parse(meta);
    Dataset& m = cache->meta_;
    m.name = j.at("name").get<std::string>();
    m.feature_names = j.at("feature_names").get<std::vector<std::string>>();
    m.class_names = j.at("class_names").get<std::vector<std::string>>();
    m.num_classes = j.at("num_classes").get<int>();
    if (j.contains("paths"))
      for (const auto& p : j.at("paths")) {
        std::optional<std::string> path = path_from_json(p.get<std::string>());
        if (!path) return nullptr;
        m.paths.push_back(std::move(*path));
      }
    if (!m.paths.empty() && static_cast<std::int64_t>(m.paths.size()) != h.rows) return nullptr;
    m.x = Tensor::empty(DType::kF32, Shape{0, h.features});
    const auto targets = j.value("targets", std::int64_t{1});
    if (targets < 1 || (h.rows > 0 && targets > h.file_bytes / 4 / h.rows)) return nullptr;  // as rows, above
    m.y = h.label_kind == kClassIds ? Tensor::empty(DType::kI32, Shape{h.rows})
                                    : Tensor::empty(DType::kF32, Shape{h.rows, targets});
    const std::int64_t labels_at = kHeaderBytes + h.rows * h.features * 4 + h.texts * (h.text_bytes + h.rows * 8);
    if (labels_at + static_cast<std::int64_t>(m.y.bytes()) != h.meta_offset) return nullptr;
    read_all(fd, m.y.raw_mutable_data(), m.y.bytes(), labels_at, path.string());
    if (h.texts != 0) {
      // Where each text ends, rising to the blob's size.
      std::vector<std::int64_t>& ends = cache->text_ends_.emplace();
      ends.resize(static_cast<std::size_t>(h.rows));
      read_all(fd, ends.data(), ends.size() * sizeof(std::int64_t), kHeaderBytes + h.text_bytes, path.string());
      std::int64_t before = 0;
      for (std::int64_t end : ends) {
        if (end < before) return nullptr;
        before = end;
      }
      if (before != h.text_bytes) return nullptr;
    }
  } catch (const std::exception&) {
    return nullptr;  // a record that does not parse: not a cache of ours
  }
  cache->rows_ = h.rows;
  cache->features_ = h.features;
  cache->fingerprint_ = {h.rows, static_cast<std::uint64_t>(h.values_hash), static_cast<std::uint64_t>(h.columns_hash)};
  return cache;
}

std::shared_ptr<const RowCache> RowCache::build(const std::filesystem::path& path, std::uint64_t key,
                                                const Source& source) {
  remove_orphans(path);
  TemporaryFile tmp{path.string() + ".tmp." + std::to_string(::getpid())};
  tmp.fd = ::open(tmp.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (tmp.fd < 0) throw RuntimeError(tmp.path.string() + ": cannot write the data cache: " + errno_text());
  const std::string where = tmp.path.string();
  Header h{};
  write_all(tmp.fd, &h, sizeof h, 0, where);  // no magic until it is whole
  Dataset meta;
  FileSink sink(tmp.fd, where, meta);
  source.write(sink, meta);
  std::int64_t at = sink.at;
  h.rows = sink.rows;
  h.features = static_cast<std::int64_t>(meta.feature_names.size());
  h.texts = sink.has_texts ? 1 : 0;
  h.text_bytes = sink.has_texts ? at - kHeaderBytes : 0;
  // A data set of texts: where each ends in the blob, then the labels.
  const auto ends_bytes = sink.text_ends.size() * sizeof(std::int64_t);
  write_all(tmp.fd, sink.text_ends.data(), ends_bytes, at, where);
  at += static_cast<std::int64_t>(ends_bytes);
  write_all(tmp.fd, meta.y.raw_data(), meta.y.bytes(), at, where);
  const DataFingerprint fp = fingerprint_of_file(tmp.fd, where, sink.at, meta, sink);
  nlohmann::json j{{"name", meta.name},
                   {"feature_names", meta.feature_names},
                   {"class_names", meta.class_names},
                   {"num_classes", meta.num_classes}};
  if (!meta.paths.empty()) {
    j["paths"] = nlohmann::json::array();
    for (const std::string& p : meta.paths) j["paths"].push_back(path_for_json(p));
  }
  if (meta.y.dtype() == DType::kF32) j["targets"] = meta.y.shape()[1];  // a regression's columns
  const std::string record = j.dump();
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.label_kind = meta.y.dtype() == DType::kI32 ? kClassIds : kTargets;
  h.key_bits = static_cast<std::int64_t>(key);
  h.values_hash = static_cast<std::int64_t>(fp.hash);
  h.columns_hash = static_cast<std::int64_t>(fp.columns.value_or(0));
  h.meta_offset = at + static_cast<std::int64_t>(meta.y.bytes());
  h.meta_bytes = static_cast<std::int64_t>(record.size());
  h.file_bytes = h.meta_offset + h.meta_bytes;
  write_all(tmp.fd, record.data(), record.size(), h.meta_offset, where);
  // The data reaches the disk before the name does: a crash after the rename finds the whole file.
  if (::fsync(tmp.fd) != 0) throw RuntimeError(where + ": cannot write the data cache: " + errno_text());
  write_all(tmp.fd, &h, sizeof h, 0, where);
  if (::fsync(tmp.fd) != 0) throw RuntimeError(where + ": cannot write the data cache: " + errno_text());
  std::error_code ec;
  std::filesystem::rename(tmp.path, path, ec);
  if (ec) throw RuntimeError(path.string() + ": cannot write the data cache: " + ec.message());
  tmp.keep = true;
  remove_other_versions(path);
  auto cache = open(path, key);
  if (!cache) throw RuntimeError(path.string() + ": the data cache just written does not read back");
  return cache;
}

void RowCache::read_rows(std::span<const std::int64_t> rows, float* out) const {
  const auto row_bytes = static_cast<std::size_t>(features_) * sizeof(float);
  if (row_bytes == 0) return;
  for (std::int64_t row : rows) TCTL_CHECK(row >= 0 && row < rows_, "RowCache::read_rows: row out of range");
  auto at = [&](std::int64_t row) { return kHeaderBytes + row * static_cast<std::int64_t>(row_bytes); };
  auto* to = reinterpret_cast<char*>(out);
  // Rows asked for in file order (a stream's windows of many, row_stream.h): each run of consecutive rows is
  // one read straight into place, no copy (bench/stream_large.sh).
  if (std::is_sorted(rows.begin(), rows.end())) {
    for (std::size_t i = 0; i < rows.size();) {
      std::size_t end = i + 1;
      while (end < rows.size() && rows[end] == rows[end - 1] + 1 && (end - i) * row_bytes < kIoBytes) ++end;
      read_all(fd_, to + i * row_bytes, (end - i) * row_bytes, at(rows[i]), path_.string());
      i = end;
    }
    return;
  }
  // Any other order: the rows in file order, each copied out of a piece of the file that holds it and the
  // ones after.
  std::vector<std::size_t> slots(rows.size());
  std::iota(slots.begin(), slots.end(), std::size_t{0});
  std::sort(slots.begin(), slots.end(), [&](std::size_t a, std::size_t b) { return rows[a] < rows[b]; });
  const std::int64_t piece_rows = std::max<std::int64_t>(1, static_cast<std::int64_t>(kIoBytes / row_bytes));
  std::vector<char> piece;
  std::int64_t first = 0, end = 0;  // the rows the piece holds
  for (std::size_t slot : slots) {
    const std::int64_t row = rows[slot];
    if (row >= end) {
      first = row;
      end = std::min({rows_, row + piece_rows, rows[slots.back()] + 1});
      piece.resize(static_cast<std::size_t>(end - first) * row_bytes);
      read_all(fd_, piece.data(), piece.size(), at(first), path_.string());
    }
    std::memcpy(to + slot * row_bytes, piece.data() + static_cast<std::size_t>(row - first) * row_bytes, row_bytes);
  }
}

void RowCache::read_texts(std::span<const std::int64_t> rows, std::vector<std::string>& out) const {
  TCTL_CHECK(has_texts(), "RowCache::read_texts: the rows are no texts");
  for (std::int64_t row : rows) TCTL_CHECK(row >= 0 && row < rows_, "RowCache::read_texts: row out of range");
  const std::vector<std::int64_t>& ends = *text_ends_;
  auto start = [&](std::int64_t row) { return row == 0 ? 0 : ends[static_cast<std::size_t>(row - 1)]; };
  out.assign(rows.size(), std::string());
  // In file order, each stretch of rows next to each other (up to kIoBytes of text, or one longer text) one
  // read, its texts copied out to their places.
  std::vector<std::size_t> slots(rows.size());
  std::iota(slots.begin(), slots.end(), std::size_t{0});
  std::stable_sort(slots.begin(), slots.end(), [&](std::size_t a, std::size_t b) { return rows[a] < rows[b]; });
  std::string piece;
  for (std::size_t i = 0; i < slots.size();) {
    const std::int64_t first = rows[slots[i]];
    std::size_t end = i + 1;
    while (end < slots.size() && rows[slots[end]] - rows[slots[end - 1]] <= 1 &&
           ends[static_cast<std::size_t>(rows[slots[end]])] - start(first) <= static_cast<std::int64_t>(kIoBytes))
      ++end;
    const std::int64_t from = start(first), to = ends[static_cast<std::size_t>(rows[slots[end - 1]])];
    piece.resize(static_cast<std::size_t>(to - from));
    read_all(fd_, piece.data(), piece.size(), kHeaderBytes + from, path_.string());
    for (std::size_t k = i; k < end; ++k) {
      const std::int64_t row = rows[slots[k]];
      out[slots[k]].assign(piece, static_cast<std::size_t>(start(row) - from),
                           static_cast<std::size_t>(ends[static_cast<std::size_t>(row)] - start(row)));
    }
    i = end;
  }
}

}  // namespace tctl
