// NCCL, opened on first use (nccl_loader.cpp): the call sites use nccl.h's functions as declared.
#pragma once

#include <string>

namespace tctl::cuda {

// Why NCCL cannot be used in this process ("NCCL could not be loaded: libnccl.so.2: cannot open shared
// object file: ..."), or "" once it is loaded. Opens it on the first call.
std::string nccl_missing();

}  // namespace tctl::cuda
