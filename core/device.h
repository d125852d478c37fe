// Devices: where a buffer lives and where a node's kernel runs. Every node carries a device name ("cpu",
// "cuda:0", "sim:0"); the placement pass resolves names to Device objects through the DeviceRegistry.
//
// core knows no backend but the CPU. A backend (kernels/cuda/, kernels/sim/, a test's own) registers itself
// from a static registrar in its own folder: its name, which gives it a DeviceKind (its slot in every op's kernel
// table), a provider that makes its devices, and its kernels (core/op_registry.h). Device names are parsed
// from what is registered.
//
// A device owns its memory and orders its work on one stream: work queued on it runs in the order it was
// queued, copies included (a thread may hold a stream of its own beside it: Device::own_stream, for
// race-check). The CPU runs everything at once, on the thread that asks. A device with a stream of its own (CUDA, the
// simulated device) may run queued work later, so it gives a freed block back to its pool only once the work queued
// before the free has finished: whatever was still reading the block reads it before anyone can write it again.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tctl {

struct Node;
class Collective;

// The most kinds of device one process knows: the CPU and up to seven backends.
inline constexpr std::size_t kMaxDeviceKinds = 8;

// A kind of device: the CPU or one backend, and with it a slot in each op's kernel table. A value; compare
// with ==. The CPU's is DeviceKind::cpu(); a backend's comes from device_kind("name").
class DeviceKind {
 public:
  static constexpr DeviceKind cpu() { return DeviceKind(0); }
  // The kernel table's index, below kMaxDeviceKinds.
  constexpr std::size_t slot() const { return slot_; }
  // "cpu", "cuda", "sim", ...
  std::string_view name() const;
  friend constexpr bool operator==(DeviceKind, DeviceKind) = default;

 private:
  friend DeviceKind device_kind(std::string_view name);
  constexpr explicit DeviceKind(std::size_t slot) : slot_(slot) {}
  std::size_t slot_;
};

// The kind named `name` ("cpu", "cuda"), given the next free slot on its first use. A backend and its kernel
// files each ask for their kind from static registrars, in any order, so a kind's slot is fixed before main();
// a new name after the device registry is made, or more than kMaxDeviceKinds of them, is an internal error.
DeviceKind device_kind(std::string_view name);

// A point in a device's stream: done once the work queued before it has finished.
class Event {
 public:
  virtual ~Event() = default;
  virtual bool done() const = 0;
  // Blocks until done; rethrows the error of failed queued work, as Device::synchronize.
  virtual void wait() = 0;
  // Microseconds on the device's own clock from `earlier` to this event, once both are done: both timed
  // events (Device::record_timed_event) of the same device. std::nullopt otherwise: either is not done, is
  // untimed or belongs elsewhere, or the device cannot time (the CPU). Negative when `earlier` came later.
  virtual std::optional<double> elapsed_us_since(const Event& earlier) const {
    (void)earlier;
    return std::nullopt;
  }
};

// A stream of a thread's own on a device (Device::own_stream); destroying it waits for its work to finish.
class OwnStream {
 public:
  virtual ~OwnStream() = default;
};

// A stream of a device's for the copies one thread makes from the host (Device::copy_stream).
class CopyStream {
 public:
  virtual ~CopyStream() = default;
  // Makes this stream's next copies wait for the work queued on the device's stream so far: for a
  // destination that work may still use (a block just allocated, which a step running now may have freed).
  virtual void wait_for_device() = 0;
  // Blocks until the copies queued on it have landed (a copy whose event could not be made, say); never
  // throws.
  virtual void finish() noexcept = 0;
};

// Work a device recorded instead of running (Device::begin_recording), to run again as a whole: CUDA's graph
// of a stream capture, replayed with one launch. Every replay reads and writes the buffers the recording
// named, and allocates nothing: the caller keeps those buffers alive and in place, and checks before each
// launch that the values it means are still there (core/device_graph.h).
class Replay {
 public:
  virtual ~Replay() = default;
  // Queues the recorded work on the device's stream, once, in the order it was recorded, as the run of step
  // `step`: a recorded kernel that draws random numbers draws that step's (KernelContext::random_key), not
  // the recorded run's.
  virtual void launch(std::int64_t step) = 0;
};

// While one lives, the work the calling thread queues on its device (kernels, copies from the host, copies on
// the device, host work) is recorded instead of run; allocating is allowed. A copy from the host is recorded
// with the bytes its source holds then, which every replay writes again. What cannot be recorded throws
// RuntimeError saying why: a copy to the host, synchronize(), a timed event. Destroying it unfinished drops
// the recorded work unrun.
class Recording {
 public:
  virtual ~Recording() = default;
  // Ends the recording and returns what it holds, ready to launch.
  virtual std::unique_ptr<Replay> finish() = 0;
};

// What a device's memory pool has done so far; tests use it to show steady-state steps allocate nothing.
struct DeviceMemoryStats {
  std::uint64_t fresh_blocks = 0;     // blocks taken from the system
  std::uint64_t reused_blocks = 0;    // allocations served from the pool
  std::uint64_t deferred_reuses = 0;  // times a free block was passed over because queued work may read it
  std::size_t bytes_reserved = 0;     // held by the pool, in use or free
  std::size_t bytes_in_use = 0;
  std::size_t bytes_peak = 0;  // the most bytes_in_use has been
};

// A place memory lives and kernels run. Thread-safe: every member may be called from any thread.
class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  // Whether `node` can run here: by default, whether its op has a kernel for this kind. A backend narrows it
  // where a kernel takes only some shapes, dtypes or attributes; placement asks this, and a node it refuses
  // runs on the CPU (core/placement.h).
  virtual bool supports(const Node& node) const;
  // Canonical name, e.g. "cpu", "cuda:0" or "sim:1".
  virtual const std::string& name() const = 0;
  // True when host code may read and write this device's memory through a plain pointer (the CPU, and
  // the simulated device, whose arena is host memory). Kernels still get only their own device's buffers.
  virtual bool host_addressable() const = 0;

  // Returns memory aligned to 64 bytes; never null (throws RuntimeError when out of memory).
  virtual void* allocate(std::size_t bytes) = 0;
  // Gives memory back; on a device with a stream, reusable once the work queued so far has finished.
  virtual void deallocate(void* p, std::size_t bytes) = 0;

  // Copies, ordered on the stream after the work queued before them. copy_from_host has read `src` when it
  // returns (the caller may reuse it at once); copy_to_host returns once the bytes are on the host.
  virtual void copy_from_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes) = 0;

  // Queues host work on the stream; the CPU runs it before returning.
  virtual void enqueue(std::function<void()> work) = 0;
  // Blocks until the work queued so far (on the calling thread's stream: see own_stream) has finished;
  // rethrows the first error queued work threw.
  virtual void synchronize() = 0;
  // An event marking the work queued so far.
  virtual std::shared_ptr<Event> record_event() = 0;
  // The same, able to time (Event::elapsed_us_since): it notes when the stream reaches it. Dearer than
  // record_event on a GPU, so only the profiler asks for it. The default, record_event(), cannot time.
  virtual std::shared_ptr<Event> record_timed_event() { return record_event(); }
  // Makes this device the calling thread's current one, for a backend whose API has such a thing (CUDA's
  // current device is per thread: a kernel launched on an executor thread goes to it). Called before each
  // kernel that runs here; cheap when it is current already.
  virtual void make_current() {}

  // A stream of the calling thread's own, while the returned object lives: the work the thread queues here
  // (kernels, copies, host work, events) goes to it, beside the device's stream and other threads' own
  // streams, so two threads' updates may overlap on the device as they do on the CPU (race-check
  // --device). While any thread holds one, a variable in a locked mode orders its writes and reads across
  // streams (Variable::Update waits for the last write's event) and a freed block is reused only once
  // every stream has passed its release; synchronize() waits for the calling thread's stream. One per
  // thread at a time, for a thread that runs its graphs itself (one inter-op thread): work it hands to
  // other threads goes to theirs. Null on a device whose work runs in turn on the calling thread anyway
  // (the CPU, the simulated device).
  virtual std::unique_ptr<OwnStream> own_stream() { return nullptr; }
  // Whether some thread holds an own stream of this device now.
  virtual bool has_own_streams() const { return false; }
  // Makes the work this thread queues here next wait until `event` (of this device) is done.
  virtual void queue_wait(const Event& event) { (void)event; }

  // A stream for the calling thread's copies from the host, beside the device's stream, while the returned
  // object lives: this thread's copy_from_host goes to it and its record_event marks it, so a batch moves to
  // the device while the kernels queued before it run (the fit loop's producer, models/train/trainer.cpp).
  // Everything else the thread does stays where it was. The caller makes sure no queued work still uses a
  // destination (CopyStream::wait_for_device), makes each reader wait for the copy's event (queue_wait),
  // and lets the object go on the thread that made it, or once that thread has ended. Null where copies
  // have no stream to go to (the CPU, whose copies are done when the call returns).
  virtual std::unique_ptr<CopyStream> copy_stream() { return nullptr; }

  // Starts recording the calling thread's work on this device (Recording); null where the device cannot
  // record (the CPU, whose work is done when its call returns). One recording per thread at a time.
  virtual std::unique_ptr<Recording> begin_recording() { return nullptr; }
  // Whether begin_recording() gives a recording here, asked when a plan is made.
  virtual bool can_record() const { return false; }

  // A device's own all-reduce (join_collective_on in core/collective.h): why this device cannot carry the
  // all-reduces of `collective` with an AllReduce kernel of its own, reading and writing its own buffers, or
  // "" when it can. Asks nothing of the other members. The default: it cannot.
  virtual std::string collective_refusal(const Collective& collective) const;
  // Makes this device's AllReduce kernel carry member `member`'s all-reduces of `collective`, once every
  // member has said it can. A device may exchange set-up data through the collective itself under `key`
  // (NCCL's unique id), every member calling this at the same point. Throws RuntimeError when it fails.
  virtual void join_collective(const std::shared_ptr<Collective>& collective, int member, std::uint64_t key) {
    (void)collective, (void)member, (void)key;
  }

  virtual DeviceMemoryStats memory_stats() const { return {}; }
  // What `tensorctl devices` shows of it beyond its name: ("memory", "79.1 GiB"), ("compute capability",
  // "9.0"), ... in the order to print.
  virtual std::vector<std::pair<std::string, std::string>> properties() const { return {}; }
};

// A process-wide switch that a backend reads by name and a run's config sets (CUDA's "allow_tf32"): core
// holds it without knowing what it means. Off until set. The reference stays valid for the life of the
// process, so a backend may look it up once; reads and writes are atomic.
std::atomic<bool>& backend_flag(std::string_view name);

// The host CPU; one process-wide instance.
Device* cpu_device();
// An event that is done already (the CPU's, whose work is done when its call returns).
std::shared_ptr<Event> done_event();

// A backend's devices (one per GPU, say), made when the registry is first used, so the devices are looked
// for only when a run asks for one.
struct ProvidedDevices {
  std::vector<std::unique_ptr<Device>> devices;  // named "<backend>:0", "<backend>:1", ... in order
  std::string why_none;                          // when there are none: why ("no CUDA-capable device is detected")
};
using DeviceProvider = ProvidedDevices (*)();

// What a backend registers about itself.
struct BackendDef {
  std::string name;  // "cuda": the DeviceKind's name and the devices' prefix
  // Makes the devices; null for a backend this build knows by name but left out, whose devices then fall back
  // to the CPU with `why_none` ("this tensorctl was built without CUDA").
  DeviceProvider provider = nullptr;
  std::string why_none;
  // The fill colour of its nodes in `tensorctl graph` (an SVG/DOT colour); grey when empty.
  std::string graph_colour;
};
// Adds a backend; a second one of the same name, or one after the registry is made, is an internal error.
// Returns true, to initialise a static.
bool register_backend(BackendDef def);

// The registration of the backend whose devices `device_name` names ("cuda" for "cuda:1"), or null for the
// CPU and for a name no backend registered. Reads the registrations only: it makes no device.
const BackendDef* find_backend(std::string_view device_name);

// Every device of the process, by name. Made on first use (the CPU, then each backend's devices, backends in
// name order), read-only afterwards.
class DeviceRegistry {
 public:
  static DeviceRegistry& instance();
  // The devices present besides the CPU, in the order names() lists them.
  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  // Each backend registered, in name order, with why it has no device where it has none ("" where it has some).
  struct Backend {
    std::string name;
    std::string why_none;
  };
  const std::vector<Backend>& backends() const { return backends_; }
  // The device with this name (a backend's bare name means its device 0: "cuda" is "cuda:0"), or nullptr when
  // absent.
  Device* find(std::string_view name) const;
  // The names of the devices present, the CPU first.
  std::vector<std::string> names() const;
  // Why `name` (which find() did not find) is absent, for a message: "no CUDA-capable device is detected",
  // "this tensorctl was built without CUDA", "present: cuda:0".
  std::string why_absent(std::string_view name) const;

 private:
  DeviceRegistry();
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<Backend> backends_;
};

// How a device is spelled, for messages, from the backends registered: "cpu, cuda, cuda:N, sim or sim:N".
std::string device_spellings();
// True for the CPU's two spellings, "cpu" and "cpu:0".
bool is_cpu_name(std::string_view name);
// True for "cpu", "cpu:0" and for a registered backend's "NAME" and "NAME:N", present or not, with N in plain
// digits ("sim:1"; "sim:01", "sim:+1" and "sim: 1" are not names).
bool is_device_name(std::string_view name);
// Why `name` is not a device name, for a message after its file and place; "" when is_device_name(name). Says so
// for an empty name and for an index with leading zeros, a sign or spaces; else "unknown device ...".
std::string device_name_error(std::string_view name);

// Copies `bytes` from `src` on device `from` to `dst` on device `to`, ordered on both streams.
void copy_between(Device& from, const void* src, Device& to, void* dst, std::size_t bytes);

}  // namespace tctl
