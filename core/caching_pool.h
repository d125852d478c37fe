// The memory pool of a device with a stream (CUDA, the simulated device): blocks in multiples of 256 bytes,
// kept by size when given back and handed out again only once the event recorded at their release is done,
// that is once the work queued before the release (which may still read the block) has finished. In steady
// state a training step takes every block from the pool and asks the system for none.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/device.h"

namespace tctl {

class CachingPool {
 public:
  // `take` gets fresh memory from the system (nullptr when there is none), `give_back` returns it.
  CachingPool(std::string device_name, std::function<void*(std::size_t)> take, std::function<void(void*)> give_back);
  // Gives every block back to the system, free or not.
  ~CachingPool();
  CachingPool(const CachingPool&) = delete;
  CachingPool& operator=(const CachingPool&) = delete;

  // A block of at least `bytes` (aligned as `take` aligns). When the system has no more, the free blocks
  // whose release is done are given back and the request tried again; then RuntimeError.
  void* allocate(std::size_t bytes);
  // Takes back a block of this pool; it is handed out again once `released_after` is done.
  void deallocate(void* p, std::shared_ptr<Event> released_after);
  // Whether `p` is a block handed out and not taken back.
  bool owns(const void* p) const;
  DeviceMemoryStats stats() const;

 private:
  void* reuse_locked(std::size_t size);
  void trim_locked();

  struct FreeBlock {
    void* p;
    std::shared_ptr<Event> released_after;
  };
  std::string device_name_;
  std::function<void*(std::size_t)> take_;
  std::function<void(void*)> give_back_;
  mutable std::mutex mu_;
  std::multimap<std::size_t, FreeBlock> free_;
  std::unordered_map<const void*, std::size_t> in_use_;
  DeviceMemoryStats stats_;
};

}  // namespace tctl
