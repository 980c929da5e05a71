// The control plane on real ranks: every host-typed agreement against values computed from the
// world size, text and bytes in both directions, the first-problem agreement, duplicates that do
// not mix with the original, and the stop agreement when only one rank saw a signal.

#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/stop_agreement.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/stop_signals.hpp"

namespace hpctrain::comm {
namespace {

ControlPlane& world() {
  static ControlPlane plane(MPI_COMM_WORLD, "world");
  return plane;
}

TEST(ControlPlane, ReducesScalarsAndVectorsExactly) {
  const int n = world().size();
  const int r = world().rank();
  EXPECT_EQ(world().rank(), r);
  EXPECT_DOUBLE_EQ(world().sum(r + 1.0), n * (n + 1) / 2.0);
  EXPECT_DOUBLE_EQ(world().max(r + 0.5), n - 0.5);
  EXPECT_DOUBLE_EQ(world().min(r + 0.5), 0.5);
  EXPECT_DOUBLE_EQ(world().reduce(r + 1.0, ReduceOp::kAvg), (n + 1) / 2.0);
  EXPECT_EQ(world().reduce(std::int64_t{1} << 40, ReduceOp::kSum), n * (std::int64_t{1} << 40));
  EXPECT_THROW(world().reduce(std::int64_t{1}, ReduceOp::kAvg), CommError);

  std::vector<double> d{1.0 * r, -1.0 * r, 0.25};
  world().reduce(d, ReduceOp::kSum);
  EXPECT_DOUBLE_EQ(d[0], n * (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(d[1], -n * (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(d[2], 0.25 * n);
  std::vector<std::int64_t> i{r, -r};
  world().reduce(i, ReduceOp::kMax);
  EXPECT_EQ(i, (std::vector<std::int64_t>{n - 1, 0}));
  std::vector<std::uint64_t> u{~std::uint64_t{0} - static_cast<std::uint64_t>(r)};
  world().reduce(u, ReduceOp::kMin);
  EXPECT_EQ(u[0], ~std::uint64_t{0} - static_cast<std::uint64_t>(n - 1));
  std::vector<int> flags{r == n - 1 ? 7 : 0, 0};
  world().reduce(flags, ReduceOp::kMax);
  EXPECT_EQ(flags, (std::vector<int>{7, 0}));
}

TEST(ControlPlane, AgreesOnFlags) {
  const int n = world().size();
  const int r = world().rank();
  EXPECT_TRUE(world().any(r == n - 1));
  EXPECT_FALSE(world().any(false));
  EXPECT_EQ(world().all(r == 0), n == 1);
  EXPECT_TRUE(world().all(true));
}

TEST(ControlPlane, GathersEveryRank) {
  const int n = world().size();
  const int r = world().rank();
  auto ints = world().all_gather(static_cast<std::int64_t>(10 * r));
  auto dbls = world().all_gather(0.5 * r);
  ASSERT_EQ(static_cast<int>(ints.size()), n);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(ints[k], 10 * k);
    EXPECT_DOUBLE_EQ(dbls[k], 0.5 * k);
  }
  const std::uint8_t mine[3] = {static_cast<std::uint8_t>(r), 1, 2};
  auto all = world().gather_bytes(mine, 3);
  if (r == 0) {
    ASSERT_EQ(static_cast<int>(all.size()), 3 * n);
    for (int k = 0; k < n; ++k) EXPECT_EQ(all[3 * k], k);
  } else {
    EXPECT_TRUE(all.empty());
  }
  std::vector<std::uint8_t> table;
  for (int k = 0; k < n; ++k) table.insert(table.end(), {static_cast<std::uint8_t>(100 + k), 9});
  std::uint8_t got[2] = {0, 0};
  world().scatter_bytes(r == 0 ? table.data() : nullptr, got, 2);
  EXPECT_EQ(got[0], 100 + r);
  EXPECT_EQ(got[1], 9);
}

TEST(ControlPlane, BroadcastsTextOfAnyLength) {
  const int r = world().rank();
  const std::string big(100000, 'x');
  EXPECT_EQ(world().broadcast(r == 0 ? big : std::string("ignored")), big);
  EXPECT_EQ(world().broadcast(r == 0 ? std::string() : std::string("ignored")), "");
  EXPECT_EQ(world().broadcast_idle(r == 0 ? std::string("decision") : std::string()), "decision");
  const int last = world().size() - 1;
  EXPECT_EQ(world().broadcast(r == last ? std::string("from the last") : "", last),
            "from the last");
}

TEST(ControlPlane, FirstProblemIsTheLowestRanksOnEveryRank) {
  const int n = world().size();
  const int r = world().rank();
  EXPECT_FALSE(world().first_problem("").has_value());
  auto got = world().first_problem(r >= n / 2 ? "problem of rank " + std::to_string(r) : "");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->first, n / 2);
  EXPECT_EQ(got->second, "problem of rank " + std::to_string(n / 2));
}

TEST(ControlPlane, DuplicateCarriesItsOwnMessages) {
  // A thread talks on the duplicate while the main thread reduces on the original: neither sees
  // the other's messages.
  auto copy = world().duplicate();
  EXPECT_EQ(copy->size(), world().size());
  EXPECT_EQ(copy->rank(), world().rank());
  const int n = world().size();
  const int r = world().rank();
  std::string on_copy;
  std::thread side([&] { on_copy = copy->broadcast(r == 0 ? "side" : ""); });
  const double on_main = world().sum(1.0);
  side.join();
  EXPECT_EQ(on_copy, "side");
  EXPECT_DOUBLE_EQ(on_main, n);
  if (n > 1) {
    if (r == 0) copy->send_text(1, 5, "to one");
    if (r == 1) {
      EXPECT_EQ(copy->recv_text(0, 5), "to one");
    }
  }
  copy->barrier();
}

TEST(StopAgreement, ASignalOnOneRankStopsEveryRank) {
  const int n = world().size();
  const int r = world().rank();
  StopAgreement agreement(world());
  StopRequest none = agreement.agree(StopRequest{});
  EXPECT_EQ(none, StopRequest{});
  EXPECT_EQ(agreement.signal(), 0);

  // Only the last rank received SIGTERM; only rank 0 sees the deadline; nobody's save is due.
  StopRequest local;
  if (r == n - 1) local.signal = SIGTERM;
  local.deadline = r == 0;
  StopRequest agreed = agreement.agree(local);
  EXPECT_EQ(agreed.signal, SIGTERM);
  EXPECT_TRUE(agreed.deadline);
  EXPECT_FALSE(agreed.save_due);
  EXPECT_EQ(agreement.signal(), SIGTERM);
  // The first agreed signal is remembered even when a later agreement has none.
  agreement.agree(StopRequest{});
  EXPECT_EQ(agreement.signal(), SIGTERM);

  // Between evaluation batches: the signal flag of one rank, as the handler sets it.
  StopAgreement between(world());
  if (r == n - 1) runtime::request_stop(SIGUSR1);
  EXPECT_TRUE(between.stop_requested());
  EXPECT_EQ(between.signal(), SIGUSR1);
  runtime::clear_stop_request();
  StopAgreement quiet(world());
  EXPECT_FALSE(quiet.stop_requested());
}

}  // namespace
}  // namespace hpctrain::comm
