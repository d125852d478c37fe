#include "core/schedule_point.h"

namespace tctl {

StepScheduler*& thread_step_scheduler() {
  static thread_local StepScheduler* scheduler = nullptr;
  return scheduler;
}

}  // namespace tctl
