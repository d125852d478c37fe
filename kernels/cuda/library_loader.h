// A library the CUDA backend opens at run time by its soname (cuBLAS: cublas_loader.cpp; NCCL:
// nccl_loader.cpp) instead of linking it: linked, each loaded at every start whether a run used it or not,
// and a machine without one could not start tensorctl. Opened once and never closed: its handles live as long
// as the devices that made them.
#pragma once

#include <dlfcn.h>

#include <string>

namespace tctl::cuda {

class LibraryLoader {
 public:
  // Opens `soname`; `what` names the library in messages ("cuBLAS").
  LibraryLoader(const char* soname, const char* what)
      : library_(::dlopen(soname, RTLD_NOW | RTLD_LOCAL)), soname_(soname), what_(what) {
    if (library_ == nullptr) {
      const char* why = ::dlerror();
      why_ = std::string(what_) + " could not be loaded: " + (why != nullptr ? why : soname_);
    }
  }
  // Points `fn` at the library's `symbol`, or at nothing when it lacks it.
  template <class Fn>
  void find(const char* symbol, Fn& fn) {
    fn = library_ != nullptr ? reinterpret_cast<Fn>(::dlsym(library_, symbol)) : nullptr;
    if (fn == nullptr && why_.empty())
      why_ = std::string(what_) + " could not be loaded: " + soname_ + " lacks " + symbol + ", which tensorctl calls";
  }
  // After the finds: whether every function was found; if not, why not, for messages.
  bool loaded(std::string& why_not) const {
    why_not = why_;
    return why_.empty();
  }

 private:
  void* library_;
  const char* soname_;
  const char* what_;
  std::string why_;
};

}  // namespace tctl::cuda
