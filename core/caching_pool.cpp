#include "core/caching_pool.h"

#include <algorithm>

#include "core/errors.h"

namespace tctl {

CachingPool::CachingPool(std::string device_name, std::function<void*(std::size_t)> take,
                         std::function<void(void*)> give_back)
    : device_name_(std::move(device_name)), take_(std::move(take)), give_back_(std::move(give_back)) {}

CachingPool::~CachingPool() {
  for (auto& [size, block] : free_) give_back_(block.p);
  for (auto& [p, size] : in_use_) give_back_(const_cast<void*>(p));
}

void* CachingPool::reuse_locked(std::size_t size) {
  auto [first, last] = free_.equal_range(size);
  for (auto it = first; it != last; ++it) {
    if (!it->second.released_after->done()) {
      ++stats_.deferred_reuses;
      continue;
    }
    void* p = it->second.p;
    free_.erase(it);
    in_use_.emplace(p, size);
    ++stats_.reused_blocks;
    return p;
  }
  return nullptr;
}

void CachingPool::trim_locked() {
  for (auto it = free_.begin(); it != free_.end();) {
    if (!it->second.released_after->done()) {
      ++it;
      continue;
    }
    give_back_(it->second.p);
    stats_.bytes_reserved -= it->first;
    it = free_.erase(it);
  }
}

void* CachingPool::allocate(std::size_t bytes) {
  // Sizes that differ a little share blocks, as in a GPU's caching allocator.
  const std::size_t size = bytes == 0 ? 256 : (bytes + 255) / 256 * 256;
  std::lock_guard lock(mu_);
  void* p = reuse_locked(size);
  if (p == nullptr) {
    p = take_(size);
    if (p == nullptr) {
      trim_locked();
      p = take_(size);
    }
    if (p == nullptr)
      throw RuntimeError("out of memory on " + device_name_ + " allocating " + std::to_string(bytes) + " bytes (" +
                         std::to_string(stats_.bytes_in_use) + " bytes in use)");
    in_use_.emplace(p, size);
    ++stats_.fresh_blocks;
    stats_.bytes_reserved += size;
  }
  stats_.bytes_in_use += size;
  stats_.bytes_peak = std::max(stats_.bytes_peak, stats_.bytes_in_use);
  return p;
}

void CachingPool::deallocate(void* p, std::shared_ptr<Event> released_after) {
  std::lock_guard lock(mu_);
  auto it = in_use_.find(p);
  TCTL_CHECK(it != in_use_.end(), device_name_ + " was given back a block it never handed out");
  free_.emplace(it->second, FreeBlock{p, std::move(released_after)});
  stats_.bytes_in_use -= it->second;
  in_use_.erase(it);
}

bool CachingPool::owns(const void* p) const {
  std::lock_guard lock(mu_);
  return in_use_.contains(p);
}

DeviceMemoryStats CachingPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace tctl
