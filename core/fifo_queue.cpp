#include "core/fifo_queue.h"

namespace tctl {

const char* queue_status_name(QueueStatus s) {
  switch (s) {
    case QueueStatus::kOk: return "ok";
    case QueueStatus::kClosed: return "closed";
    case QueueStatus::kTimeout: return "timeout";
  }
  return "?";
}

}  // namespace tctl
