// Schedule points: the places in Variable's code where one thread's access to shared state can be ordered
// against another's (a lock taken or let go, an element loaded, stored or compared-and-swapped, a snapshot's
// version read or published). race-check --explore installs a StepScheduler on the threads it drives, which
// blocks each of them at every point until it chooses that thread's step, and so enumerates the orders.
// Every other thread has none: a point is then one thread-local load and a branch.
//
// Threads: a StepScheduler is installed on, and called from, the thread it drives. It must never stop a
// thread that holds a lock it does not know of; Variable's points sit outside the locks it takes for a
// pointer swap (version_mu_), and inside only the mode's own lock, which the scheduler tracks.
#pragma once

#include <cstdint>

namespace tctl {

class Variable;

enum class Access {
  kLock,            // about to take a lock (`location`: the mutex); enabled only while nobody holds it
  kUnlock,          // about to let go of it
  kLoad,            // an element's load (`location`: the element)
  kStore,           // an element's store
  kCompareAndSwap,  // an element's compare-and-swap, which fails when another store came between
  kReadVersion,     // a snapshot variable's published version, read (`location`: the variable's version)
  kPublish,         // a new version published
  // For models of other machines' ordering rules (race-check's GPU streams), not Variable's code:
  kAtomicAdd,  // an element's indivisible read-modify-write (a device's atomicAdd)
  kWait,       // waits until `ready(location)` holds (an event recorded, a queued item there)
  kSignal,     // changes what a kWait on `location` sees (records the event, queues the item)
};

// One step a thread is about to take.
struct AccessPoint {
  Access access = Access::kLoad;
  const void* location = nullptr;  // what the step touches: steps on different locations commute
  const Variable* variable = nullptr;
  std::int64_t index = -1;               // the element, for loads, stores and compare-and-swaps
  const char* name = nullptr;            // the location's name where it is no Variable's
  bool (*ready)(const void*) = nullptr;  // kWait: whether the step can be taken now
};

class StepScheduler {
 public:
  virtual ~StepScheduler() = default;
  // Returns when the calling thread may take `point`'s step.
  virtual void before(const AccessPoint& point) = 0;
  // What the step just taken read or wrote, and whether it took effect (a compare-and-swap may fail).
  virtual void after(float value, bool took_effect) = 0;
};

// The calling thread's scheduler, or null (every thread but an explorer's).
StepScheduler*& thread_step_scheduler();

inline void schedule_point(const AccessPoint& point) {
  if (StepScheduler* s = thread_step_scheduler()) s->before(point);
}
inline void schedule_result(float value, bool took_effect = true) {
  if (StepScheduler* s = thread_step_scheduler()) s->after(value, took_effect);
}

}  // namespace tctl
