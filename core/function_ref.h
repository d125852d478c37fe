// FunctionRef: a non-owning reference to a callable, for calls that use the callable only while they run
// (parallel_for). Unlike std::function it never allocates: a kernel's lambda that captures a dozen
// references would otherwise cost a heap allocation on every call.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace tctl {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  // The callable must outlive every call through this reference.
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
      FunctionRef(F&& f)  // NOLINT: implicit, so a lambda converts at the call site as it did to std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace tctl
