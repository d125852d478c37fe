// CUDA graphs: CudaDevice's recordings (Device::begin_recording), whose members cuda_device.cpp calls while
// the calling thread records; kernels/cuda/recording.cpp says how they work and holds their replays.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "core/device.h"
#include "kernels/cuda/cuda_device.h"

namespace tctl::cuda {

// What a recording made that its replay must keep: blocks freed during the capture, pinned buffers (copies'
// bytes, reports' words), host work, and the reports to queue at each launch.
struct CudaDevice::Kept {
  struct Report {
    void* word;
    std::function<void(const void* host)> read;
  };
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::vector<void*> pinned;
  std::vector<std::unique_ptr<HostWork>> works;
  std::vector<Report> reports;
  // The step word (CudaDevice::recording_step_word), one of `blocks`, when a recorded kernel reads it; each
  // launch writes it first.
  std::int64_t* step_word = nullptr;
  // Gives the blocks back to `pool` and frees the pinned buffers, once nothing recorded can still use them.
  void release(CachingPool& pool);
};

class CudaDevice::Capture final : public Recording {
 public:
  explicit Capture(CudaDevice& device);
  ~Capture() override;
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  std::unique_ptr<Replay> finish() override;

  const CudaDevice& device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // An event marking the work queued on the device's stream before the recording began.
  std::shared_ptr<Event> queued_before() const { return before_; }
  // The device's members while this thread records: a freed block kept, a copy from pinned bytes taken
  // now, host work kept for every replay, a report into a word of the replay's.
  void keep(void* p, std::size_t bytes) { kept_.blocks.emplace_back(p, bytes); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes);
  void enqueue(std::function<void()> work);
  void report(const void* src, std::size_t bytes, std::function<void(const void* host)> read);
  // The step word, made when a kernel first asks for it.
  std::int64_t* step_word();

 private:
  void* pinned(std::size_t bytes);
  // Takes the stream out of capture: the graph, or null with ended_with_ saying why.
  cudaGraph_t end_capture();

  CudaDevice& device_;
  std::shared_ptr<Event> before_;
  cudaStream_t stream_ = nullptr;
  Kept kept_;
  bool handed_over_ = false;  // to the replay, which gives them back
  std::string ended_with_;
};

// Queues on `stream` a write of `step` into the device word `word` (kernels/cuda/step_word.cu): a kernel,
// whose argument is copied at launch, so the next launch may write another step before this one has run.
void write_step_word(cudaStream_t stream, std::int64_t* word, std::int64_t step);

}  // namespace tctl::cuda
