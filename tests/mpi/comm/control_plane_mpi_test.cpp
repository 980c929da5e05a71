// The control plane on real ranks: every host-typed agreement against values computed from the
// world size, text and bytes in both directions, the first-problem agreement, duplicates that do
// not mix with the original, and the stop agreement when only one rank saw a signal.

#include <gtest/gtest.h>

#include <csignal>
#include <cstdint>
#include <thread>
#include <vector>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/stop_agreement.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/stop_signals.hpp"

namespace hpctrain::comm {
namespace {

ControlPlane& plane() {
  static ControlPlane instance(MPI_COMM_WORLD, "world");
  return instance;
}

TEST(ControlPlane, ReducesScalarsAndVectorsExactly) {
  const int n = plane().size();
  const int r = plane().rank();
  EXPECT_EQ(plane().rank(), r);
  EXPECT_DOUBLE_EQ(plane().sum(r + 1.0), n * (n + 1) / 2.0);
  EXPECT_DOUBLE_EQ(plane().max(r + 0.5), n - 0.5);
  EXPECT_DOUBLE_EQ(plane().min(r + 0.5), 0.5);
  EXPECT_DOUBLE_EQ(plane().reduce(r + 1.0, ReduceOp::kAvg), (n + 1) / 2.0);
  EXPECT_EQ(plane().reduce(std::int64_t{1} << 40, ReduceOp::kSum), n * (std::int64_t{1} << 40));
  EXPECT_THROW(plane().reduce(std::int64_t{1}, ReduceOp::kAvg), CommError);

  std::vector<double> d{1.0 * r, -1.0 * r, 0.25};
  plane().reduce(d, ReduceOp::kSum);
  EXPECT_DOUBLE_EQ(d[0], n * (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(d[1], -n * (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(d[2], 0.25 * n);
  std::vector<std::int64_t> i{r, -r};
  plane().reduce(i, ReduceOp::kMax);
  EXPECT_EQ(i, (std::vector<std::int64_t>{n - 1, 0}));
  std::vector<std::uint64_t> u{~std::uint64_t{0} - static_cast<std::uint64_t>(r)};
  plane().reduce(u, ReduceOp::kMin);
  EXPECT_EQ(u[0], ~std::uint64_t{0} - static_cast<std::uint64_t>(n - 1));
  std::vector<int> flags{r == n - 1 ? 7 : 0, 0};
  plane().reduce(flags, ReduceOp::kMax);
  EXPECT_EQ(flags, (std::vector<int>{7, 0}));
}

TEST(ControlPlane, AgreesOnFlags) {
  const int n = plane().size();
  const int r = plane().rank();
  EXPECT_TRUE(plane().any(r == n - 1));
  EXPECT_FALSE(plane().any(false));
  EXPECT_EQ(plane().all(r == 0), n == 1);
  EXPECT_TRUE(plane().all(true));
}

TEST(ControlPlane, GathersEveryRank) {
  const int n = plane().size();
  const int r = plane().rank();
  auto ints = plane().all_gather(static_cast<std::int64_t>(10 * r));
  auto dbls = plane().all_gather(0.5 * r);
  ASSERT_EQ(static_cast<int>(ints.size()), n);
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(ints[k], 10 * k);
    EXPECT_DOUBLE_EQ(dbls[k], 0.5 * k);
  }
  const std::uint8_t mine[3] = {static_cast<std::uint8_t>(r), 1, 2};
  auto all = plane().gather_bytes(mine, 3);
  if (r == 0) {
    ASSERT_EQ(static_cast<int>(all.size()), 3 * n);
    for (int k = 0; k < n; ++k) EXPECT_EQ(all[3 * k], k);
  } else {
    EXPECT_TRUE(all.empty());
  }
  std::vector<std::uint8_t> table;
  for (int k = 0; k < n; ++k) table.insert(table.end(), {static_cast<std::uint8_t>(100 + k), 9});
  std::uint8_t got[2] = {0, 0};
  plane().scatter_bytes(r == 0 ? table.data() : nullptr, got, 2);
  EXPECT_EQ(got[0], 100 + r);
  EXPECT_EQ(got[1], 9);
}

TEST(ControlPlane, BroadcastsTextOfAnyLength) {
  const int r = plane().rank();
  const std::string big(100000, 'x');
  EXPECT_EQ(plane().broadcast(r == 0 ? big : std::string("ignored")), big);
  EXPECT_EQ(plane().broadcast(r == 0 ? std::string() : std::string("ignored")), "");
  EXPECT_EQ(plane().broadcast_idle(r == 0 ? std::string("decision") : std::string()), "decision");
  const int last = plane().size() - 1;
  EXPECT_EQ(plane().broadcast(r == last ? std::string("from the last") : "", last),
            "from the last");
}

TEST(ControlPlane, FirstProblemIsTheLowestRanksOnEveryRank) {
  const int n = plane().size();
  const int r = plane().rank();
  EXPECT_FALSE(plane().first_problem("").has_value());
  auto got = plane().first_problem(r >= n / 2 ? "problem of rank " + std::to_string(r) : "");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->first, n / 2);
  EXPECT_EQ(got->second, "problem of rank " + std::to_string(n / 2));
}

TEST(ControlPlane, DuplicateCarriesItsOwnMessages) {
  // A thread talks on the duplicate while the main thread reduces on the original: neither sees
  // the other's messages.
  auto copy = plane().duplicate();
  EXPECT_EQ(copy->size(), plane().size());
  EXPECT_EQ(copy->rank(), plane().rank());
  const int n = plane().size();
  const int r = plane().rank();
  std::string on_copy;
  std::thread side([&] { on_copy = copy->broadcast(r == 0 ? "side" : ""); });
  const double on_main = plane().sum(1.0);
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

TEST(ControlPlane, SendsBulkBytesIntoPlaceInOrder) {
  // Every other rank sends rank 0 two messages of one tag (a few MiB, then none): they arrive in
  // order, byte for byte, where rank 0 asks (prepare text's token ids).
  const int n = plane().size();
  const int r = plane().rank();
  const auto pattern = [](int rank, std::size_t i) {
    return static_cast<std::uint8_t>((i * 131 + static_cast<std::size_t>(rank) * 7) % 251);
  };
  const std::size_t bytes = (std::size_t{3} << 20) + 5;
  if (r != 0) {
    std::vector<std::uint8_t> mine(bytes);
    for (std::size_t i = 0; i < bytes; ++i) mine[i] = pattern(r, i);
    plane().send_bytes(0, 9, mine.data(), mine.size());
    plane().send_bytes(0, 9, nullptr, 0);
  } else {
    std::vector<std::uint8_t> all(bytes * static_cast<std::size_t>(n), 0);
    for (int from = n - 1; from >= 1; --from) {  // any order of ranks: each pair has its own
      plane().recv_bytes(from, 9, all.data() + bytes * static_cast<std::size_t>(from), bytes);
      plane().recv_bytes(from, 9, nullptr, 0);
    }
    for (int from = 1; from < n; ++from) {
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < bytes; ++i) {
        wrong += all[bytes * static_cast<std::size_t>(from) + i] != pattern(from, i);
      }
      EXPECT_EQ(wrong, 0u) << "from rank " << from;
    }
  }
  plane().barrier();
}

TEST(StopAgreement, ASignalOnOneRankStopsEveryRank) {
  const int n = plane().size();
  const int r = plane().rank();
  StopAgreement agreement(plane());
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
  StopAgreement between(plane());
  if (r == n - 1) runtime::request_stop(SIGUSR1);
  EXPECT_TRUE(between.stop_requested());
  EXPECT_EQ(between.signal(), SIGUSR1);
  runtime::clear_stop_request();
  StopAgreement quiet(plane());
  EXPECT_FALSE(quiet.stop_requested());
}

}  // namespace
}  // namespace hpctrain::comm
