#include "models/data/row_stream.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/errors.h"
#include "core/prefetcher.h"

namespace tctl {

RowStream::RowStream(std::shared_ptr<const RowCache> cache, std::vector<std::int64_t> rows, Tensor labels,
                     std::int64_t window_rows, std::int64_t batch_size, std::optional<Standardizer> scale)
    : cache_(std::move(cache)), labels_(std::move(labels)), scale_(std::move(scale)) {
  TCTL_CHECK(batch_size > 0 && window_rows > 0, "RowStream: window and batch sizes must be positive");
  const auto n = static_cast<std::int64_t>(rows.size());
  size_ = n;
  // Whole batches per window, so that an epoch's steps are the in-memory run's: ceil(n / batch_size).
  window_rows_ = std::max(batch_size, window_rows / batch_size * batch_size);
  if (window_rows_ >= n) window_rows_ = std::max<std::int64_t>(n, 1);
  // Many windows: the rows in file order, so that a window is one stretch of the file, read straight into
  // place (RowCache::read_rows); the epoch shuffles each window's rows anyway. One window keeps split order:
  // it is the in-memory part, row for row.
  if (windows() > 1) std::sort(rows.begin(), rows.end());
  rows_ = std::make_shared<const std::vector<std::int64_t>>(std::move(rows));
}

std::shared_ptr<const RowStream> RowStream::prepared(const std::optional<Standardizer>& scale,
                                                     const std::optional<Shape>& row_shape,
                                                     std::shared_ptr<const TextVectorizer> text) const {
  auto out = std::make_shared<RowStream>(*this);
  out->scale_ = scale;
  out->row_shape_ = row_shape;
  if (text) out->text_ = std::move(text);
  out->resident_ = std::make_shared<Resident>();  // scaled and shaped otherwise
  return out;
}

const Dataset& RowStream::resident(const Dataset& like) const {
  TCTL_CHECK(windows() == 1, "RowStream::resident: the stream has more than one window");
  std::call_once(resident_->loaded, [&] { load(0, like, resident_->window); });
  return resident_->window;
}

void RowStream::load(std::int64_t w, const Dataset& like, Dataset& into) const {
  TCTL_CHECK(w >= 0 && w < windows(), "RowStream::load: no such window");
  const std::int64_t first = w * window_rows_;
  const std::int64_t count = window_size(w);
  const auto rows =
      std::span<const std::int64_t>(*rows_).subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(count));
  const Shape shape{count, cache_->features()};
  // The window before's buffer when this one fits it exactly (all but the last do).
  if (into.x.defined() && into.x.unique() && into.x.num_elements() == shape.num_elements())
    into.x = into.x.reshaped(shape);
  else
    into.x = Tensor::empty(DType::kF32, shape);
  cache_->read_rows(rows, into.x.mutable_data<float>());
  into.texts.clear();
  if (cache_->has_texts()) cache_->read_texts(rows, into.texts);
  if (text_) into.x = text_->vectorize(into.texts);
  if (scale_) into.x = scale_->apply(std::move(into.x));
  if (row_shape_) into.x = into.x.reshaped(Shape::concat(count, *row_shape_));
  Tensor y = std::move(into.y);
  into.y = gather_rows(labels_, rows, y);
  // An image folder's windows name their files (test.csv's path column).
  const std::vector<std::string>& paths = cache_->metadata().paths;
  into.paths.clear();
  if (!paths.empty())
    for (std::int64_t r : rows) into.paths.push_back(paths[static_cast<std::size_t>(r)]);
  into.num_classes = like.num_classes;
  into.class_names = like.class_names;
  into.feature_names = like.feature_names;
  into.name = like.name;
}

void RowStream::set_resident(Dataset window) const {
  TCTL_CHECK(windows() == 1 && window.size() == size(), "RowStream::set_resident: not the stream's one window");
  std::call_once(resident_->loaded, [&] { resident_->window = std::move(window); });
}

std::int64_t window_count(const Dataset& data) { return data.stream ? data.stream->windows() : 1; }

void for_each_window(const Dataset& data, std::span<const std::int64_t> which,
                     FunctionRef<bool(std::int64_t w, const Dataset& window)> use, double* waited) {
  if (!data.stream) {
    TCTL_CHECK(which.size() == 1 && which[0] == 0, "data in memory is one window");
    use(0, data);
    return;
  }
  const RowStream& stream = *data.stream;
  if (stream.windows() == 1) {
    TCTL_CHECK(which.size() == 1 && which[0] == 0, "a stream of one window has only window 0");
    const auto asked = std::chrono::steady_clock::now();
    const Dataset& window = stream.resident(data);
    if (waited != nullptr) *waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
    use(0, window);
    return;
  }
  // One window being used and one being read: the stream's memory bound (row_stream.h).
  Prefetcher<Dataset> windows(static_cast<std::int64_t>(which.size()), 1, 2, [&](std::int64_t i, Dataset& into) {
    stream.load(which[static_cast<std::size_t>(i)], data, into);
  });
  for (std::size_t i = 0; i < which.size(); ++i) {
    const auto asked = std::chrono::steady_clock::now();
    Dataset window = windows.next(static_cast<std::int64_t>(i));
    if (waited != nullptr) *waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
    if (!use(which[i], window)) return;
    windows.give_back(std::move(window));
  }
}

void for_each_window(const Dataset& data, FunctionRef<void(const Dataset& window)> use) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(window_count(data)));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  for_each_window(data, all, [&](std::int64_t, const Dataset& window) {
    use(window);
    return true;
  });
}

}  // namespace tctl
