// A part (training, validation or test rows) of a data set kept in a RowCache, read a window at a time: what a
// streamed run trains and evaluates on, in bounded memory whatever the file's size.
//
// The part's rows are in split order, as the in-memory part holds them. A stream of one window (window_rows()
// >= n) keeps that order: its window is the in-memory part, row for row. A stream of more takes them in file
// order and cuts it into windows of window_rows() rows, each one stretch of the file, read straight into
// place; the trainer shuffles each window's rows, as it does a whole data set's. A window is loaded as an
// ordinary Dataset (scaled, with its labels; a cache of texts gives each window's texts, and their ids as x).
//
// Memory: a window's rows (window_rows() x features x 4 bytes) for each window held at once (two while
// training, one used and the next being read), 8 bytes per row of the part for its place in the cache, and
// 4 per row of the whole data set for the labels (shared by the parts).
// Immutable once made; load() may run on any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "core/function_ref.h"
#include "models/data/dataset.h"
#include "models/data/row_cache.h"
#include "models/data/text_vectorizer.h"

namespace tctl {

class RowStream {
 public:
  // `rows`: the part's rows of `cache`, in split order. `labels`: the labels of every row of the cache (the
  // cache's own, or made floats for a binary loss). `window_rows` is rounded down to a multiple of
  // `batch_size` (at least one batch), so that a window holds whole batches. `scale`: applied to every window.
  RowStream(std::shared_ptr<const RowCache> cache, std::vector<std::int64_t> rows, Tensor labels,
            std::int64_t window_rows, std::int64_t batch_size, std::optional<Standardizer> scale = std::nullopt);

  std::int64_t size() const { return size_; }
  std::int64_t window_rows() const { return window_rows_; }
  std::int64_t windows() const { return (size() + window_rows_ - 1) / window_rows_; }
  std::int64_t window_size(std::int64_t w) const { return std::min(window_rows_, size() - w * window_rows_); }
  const RowCache& cache() const { return *cache_; }
  // The same rows scaled by `scale` (when given), each window's x shaped [n, ...row_shape] (a model's input,
  // when given). A cache of texts: each window's texts turned into ids first, by `text` when given, else by
  // the vectorizer this stream has (if any).
  std::shared_ptr<const RowStream> prepared(const std::optional<Standardizer>& scale,
                                            const std::optional<Shape>& row_shape,
                                            std::shared_ptr<const TextVectorizer> text = nullptr) const;

  // The only window of a stream of one (windows() == 1), loaded on first use and kept: every epoch reads the
  // same rows, as the in-memory run does. Thread-safe.
  const Dataset& resident(const Dataset& like) const;
  // Makes `window` the resident window, when it holds what load(0) would: the caller read it already (to fit
  // the scaling on it) and scaled it in place, instead of reading it twice.
  void set_resident(Dataset window) const;

  // Window w's rows as a Dataset in memory, its x scaled, with `like`'s names and class count, into `into`
  // (whose buffers are reused when it holds them alone). Throws RuntimeError when the cache cannot be read.
  void load(std::int64_t w, const Dataset& like, Dataset& into) const;

 private:
  std::shared_ptr<const RowCache> cache_;
  // The part's rows of the cache, window after window: in split order (one window) or file order (shared by
  // the streams prepared() makes).
  std::shared_ptr<const std::vector<std::int64_t>> rows_;
  std::int64_t size_ = 0;
  Tensor labels_;
  std::int64_t window_rows_;
  std::optional<Standardizer> scale_;
  std::optional<Shape> row_shape_;
  std::shared_ptr<const TextVectorizer> text_;
  struct Resident {
    std::once_flag loaded;
    Dataset window;
  };
  std::shared_ptr<Resident> resident_ = std::make_shared<Resident>();
};

// How many windows `data` comes in: its stream's, or 1 for data in memory.
std::int64_t window_count(const Dataset& data);

// Calls `use(w, window)` for the windows `which` of `data`, in that order, until it returns false: for a
// stream, each window read on a thread of its own while the one before is used (two in memory at most); for
// data in memory, `which` must be {0} and the window is `data` itself. Adds the seconds `use` was kept
// waiting for a window to `*waited` when given. Rethrows what reading a window threw.
void for_each_window(const Dataset& data, std::span<const std::int64_t> which,
                     FunctionRef<bool(std::int64_t w, const Dataset& window)> use, double* waited = nullptr);

// Every window of `data` in order, for a caller that needs every row once (evaluation, statistics, writing).
void for_each_window(const Dataset& data, FunctionRef<void(const Dataset& window)> use);

}  // namespace tctl
