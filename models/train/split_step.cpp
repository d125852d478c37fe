#include "models/train/split_step.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <span>
#include <string>

#include "core/device.h"
#include "models/data/dataset.h"

namespace tctl {

RunThreads::RunThreads(int runs) {
  for (int r = 1; r < runs; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RunThreads::~RunThreads() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void RunThreads::run(const std::function<void(int)>& fn) {
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    left_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  start_.notify_all();
  fn(0);
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return left_ == 0; });
  fn_ = nullptr;
}

void RunThreads::loop(int r) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn = nullptr;
    {
      std::unique_lock lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    (*fn)(r);
    std::lock_guard lock(mu_);
    if (--left_ == 0) done_.notify_one();
  }
}

std::int64_t first_row_of_member(std::int64_t batch, std::int64_t members, std::int64_t m) {
  return m * (batch / members) + std::min(m, batch % members);
}

std::vector<float> packed_values(const std::vector<std::shared_ptr<Variable>>& vars) {
  std::vector<float> out;
  for (const auto& v : vars) {
    const std::vector<float> f = v->read().to(cpu_device()).to_floats();
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

void assign_packed(const std::vector<std::shared_ptr<Variable>>& vars, const std::vector<float>& values) {
  std::size_t at = 0;
  for (const auto& v : vars) {
    const auto n = static_cast<std::size_t>(v->shape().num_elements());
    v->assign(Tensor::from_floats(v->shape(), std::span<const float>(values).subspan(at, n)));
    at += n;
  }
}

std::vector<std::shared_ptr<Variable>> moving_statistics(const Sequential& net) {
  std::vector<std::shared_ptr<Variable>> out;
  for (const auto& v : net.variables())
    if (!v->trainable()) out.push_back(v);
  return out;
}

std::vector<Tensor> SplitStepStrategy::step(const StepRequest& request) {
  const bool stop_vote = stop_flag_set();
  const std::int64_t batch = request.batch_rows > 0 ? request.batch_rows : request.x.shape()[0];
  TCTL_CHECK(batch >= 1 && request.targets.shape()[0] == request.x.shape()[0],
             "a data-parallel step needs a batch of one row or more");
  std::vector<Share> shares = split_batch(request.x, request.targets, batch);
  run_shares(shares, request);
  ++steps_;
  end_runs(shares, request.step);
  return results(shares, batch, request.step, stop_vote);
}

// Rows split evenly between the members (every replica of every worker), the first taking one more where they
// do not divide.
std::vector<Share> SplitStepStrategy::split_batch(const Tensor& x, const Tensor& targets, std::int64_t batch) {
  // x holds the whole batch, or this process's rows of it (local_rows), which start at `offset`.
  const auto [offset, local] =
      x.shape()[0] == batch ? std::pair<std::int64_t, std::int64_t>{0, batch} : local_rows(batch);
  TCTL_CHECK(x.shape()[0] == local, "a data-parallel step fed rows other than local_rows");
  const int n = members_;
  std::vector<Share> shares(static_cast<std::size_t>(n));
  for (int m = 0; m < n; ++m) {
    Share& s = shares[static_cast<std::size_t>(m)];
    s.begin = first_row_of_member(batch, n, m);
    s.rows = first_row_of_member(batch, n, m + 1) - s.begin;
    s.weight = static_cast<float>(static_cast<double>(s.rows) / static_cast<double>(batch));
  }
  while (static_cast<std::int64_t>(row_numbers_.size()) < batch)
    row_numbers_.push_back(static_cast<std::int64_t>(row_numbers_.size()));
  const std::span<const std::int64_t> fed_rows =
      std::span<const std::int64_t>(row_numbers_).first(static_cast<std::size_t>(local));
  share_buffers_.resize(static_cast<std::size_t>(runs()));
  for (int r = 0; r < runs(); ++r) {
    // This process's runs are members first_member_ .. first_member_ + runs() - 1.
    Share& s = shares[static_cast<std::size_t>(first_member_ + r)];
    const std::span<const std::int64_t> rows =
        s.rows > 0 ? fed_rows.subspan(static_cast<std::size_t>(s.begin - offset), static_cast<std::size_t>(s.rows))
                   : fed_rows.first(1);
    auto& [bx, bt] = share_buffers_[static_cast<std::size_t>(r)];
    s.x = gather_rows(x, rows, bx);
    s.targets = gather_rows(targets, rows, bt);
  }
  return shares;
}

void SplitStepStrategy::run_shares(std::vector<Share>& shares, const StepRequest& request) {
  auto share_of = [&](int r) -> Share& { return shares[static_cast<std::size_t>(first_member_ + r)]; };
  begin_runs(request);
  // The first run to fail aborts the collective, so the others stop waiting for it in an all-reduce; its
  // error is the one reported, the others' ("the group was aborted") follow from it.
  std::atomic<int> first_failure{-1};
  const std::shared_ptr<Collective> group = collective();
  auto run_one = [&](int r) {
    Share& s = share_of(r);
    const ReplicaHandle replica = run_handle(r);
    const TracedPass& pass = replica.step->pass;
    std::vector<Feed> feeds{{pass.x, s.x}, {pass.targets, s.targets}};
    if (pass.weight.valid()) feeds.push_back({pass.weight, Tensor::scalar(s.weight)});
    const Output fetches[] = {pass.loss, pass.scores};
    RunOptions ro;
    ro.step = request.step;
    ro.batch_offset = s.rows > 0 ? s.begin : 0;
    ro.profiler = r == 0 ? request.profiler : nullptr;
    try {
      run_starts(r);
      s.out =
          replica.step->session->run(feeds, fetches, request.accumulation.apply ? pass.updates : pass.accumulates, ro);
      run_ended(r);
    } catch (const std::exception& e) {
      s.error = std::current_exception();
      int none = -1;
      if (first_failure.compare_exchange_strong(none, r) && group)
        group->abort("replica " + std::to_string(first_member_ + r) + " failed: " + e.what());
    }
  };
  if (threads_) {
    threads_->run(run_one);
  } else {
    run_one(0);
  }
  if (const int failed = first_failure.load(); failed >= 0) {
    after_failure();
    std::rethrow_exception(share_of(failed).error);
  }
}

Tensor& SplitStepStrategy::scores_of(const Shape& shape) {
  if (!scores_.defined() || scores_.shape() != shape || !scores_.unique()) scores_ = Tensor::empty(DType::kF32, shape);
  return scores_;
}

std::vector<Tensor> SplitStepStrategy::results(const std::vector<Share>& shares, std::int64_t batch,
                                               std::int64_t /*step*/, bool /*stop_vote*/) {
  const Tensor& p0 = shares[static_cast<std::size_t>(first_member_)].out[1];
  Tensor& scores = scores_of(Shape::concat(batch, p0.shape().without_batch()));
  const std::int64_t width = p0.num_elements() / p0.shape()[0];
  float total = 0.0f;
  for (const Share& s : shares) {
    total += loss_term(s);
    if (s.rows > 0)
      std::memcpy(scores.mutable_data<float>() + s.begin * width, s.out[1].data<float>(), s.out[1].bytes());
  }
  return {Tensor::scalar(total / static_cast<float>(batch)), scores};
}

}  // namespace tctl
