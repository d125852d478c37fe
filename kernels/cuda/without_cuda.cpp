// A build without the CUDA backend still knows the name "cuda": a config written on a GPU machine names
// cuda:0, and here its layers fall back to the CPU with one warning saying why, as on a machine without a
// GPU, instead of failing as an unknown device.
#include "core/device.h"

namespace tctl {
namespace {
[[maybe_unused]] const bool cuda_backend_registered =
    register_backend({.name = "cuda", .why_none = "this tensorctl was built without CUDA"});
}  // namespace
}  // namespace tctl
