// MpiCommunicator collectives checked against values computed from the world size, for every
// supported dtype and op, on contiguous and non-contiguous tensors, blocking and asynchronous.

#include <gtest/gtest.h>

#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::comm {
namespace {

MpiCommunicator& world() {
  static MpiCommunicator comm(MPI_COMM_WORLD, "world", /*async_thread=*/true);
  return comm;
}

const std::vector<torch::ScalarType> kFloatTypes = {torch::kFloat, torch::kDouble, torch::kBFloat16,
                                                    torch::kHalf};
const std::vector<torch::ScalarType> kIntTypes = {torch::kInt, torch::kLong, torch::kChar,
                                                  torch::kByte};

// Rank r contributes (r + 1) + column index: small integers, exact in every dtype.
torch::Tensor contribution(int rank, torch::ScalarType dtype, int64_t rows = 5, int64_t cols = 3) {
  auto col = torch::arange(cols, torch::kDouble).repeat({rows, 1});
  return (col + (rank + 1)).to(dtype);
}

torch::Tensor expected(ReduceOp op, int n, int64_t rows = 5, int64_t cols = 3) {
  auto col = torch::arange(cols, torch::kDouble).repeat({rows, 1});
  switch (op) {
    case ReduceOp::kSum: return col * n + n * (n + 1) / 2.0;
    case ReduceOp::kAvg: return col + (n + 1) / 2.0;
    case ReduceOp::kMax: return col + n;
    case ReduceOp::kMin: return col + 1;
  }
  return {};
}

void expect_equal(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  EXPECT_TRUE(torch::equal(got.to(torch::kDouble), want)) << what << "\ngot\n"
                                                          << got << "\nwant\n"
                                                          << want;
}

TEST(MpiCommunicator, AllReduceEveryFloatDtypeAndOp) {
  const int n = world().size();
  for (auto dtype : kFloatTypes) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      auto t = contribution(world().rank(), dtype);
      world().all_reduce(t, op);
      EXPECT_EQ(t.scalar_type(), dtype);
      expect_equal(t, expected(op, n),
                   std::string(c10::toString(dtype)) + " " + reduce_op_name(op));
    }
  }
}

TEST(MpiCommunicator, AllReduceEveryIntDtype) {
  const int n = world().size();
  for (auto dtype : kIntTypes) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      auto t = contribution(world().rank(), dtype);
      world().all_reduce(t, op);
      expect_equal(t, expected(op, n),
                   std::string(c10::toString(dtype)) + " " + reduce_op_name(op));
    }
    auto t = contribution(world().rank(), dtype);
    EXPECT_THROW(world().all_reduce(t, ReduceOp::kAvg), CommError) << c10::toString(dtype);
  }
}

TEST(MpiCommunicator, BFloat16SumRoundsOnceFromFloat32) {
  // 1 + 2^-8 is not representable in bfloat16 (8 significant bits), but n * (1 + 2^-8) summed in
  // float32 and rounded once is exact whenever n is a power of two: a reduction done in bfloat16
  // would round every partial sum instead.
  const int n = world().size();
  auto t = torch::full({4}, 1.0 + 1.0 / 256, torch::kFloat);
  world().all_reduce(t, ReduceOp::kSum);
  auto b = torch::full({4}, 1.0 + 1.0 / 256, torch::kFloat).to(torch::kBFloat16);
  world().all_reduce(b, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(b, t.to(torch::kBFloat16))) << b << t;
  (void)n;
}

TEST(MpiCommunicator, NonContiguousInPlace) {
  const int n = world().size();
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kLong}) {
    auto base = contribution(world().rank(), dtype, 3, 5);  // [3, 5]
    auto view = base.t();                                   // [5, 3], not contiguous
    ASSERT_FALSE(view.is_contiguous());
    world().all_reduce(view, ReduceOp::kSum);
    expect_equal(base, expected(ReduceOp::kSum, n, 3, 5), "base after reducing its transpose");
    // A strided slice: every other column.
    auto wide = contribution(world().rank(), dtype, 4, 6);
    auto slice = wide.slice(1, 0, 6, 2);
    world().all_reduce(slice, ReduceOp::kMax);
    auto want = contribution(world().rank(), torch::kDouble, 4, 6);
    want.slice(1, 0, 6, 2).copy_(expected(ReduceOp::kMax, n, 4, 6).slice(1, 0, 6, 2));
    expect_equal(wide, want, "strided slice reduced, other columns untouched");
  }
}

TEST(MpiCommunicator, AsyncCompletesInOrderAndMixesWithBlocking) {
  const int n = world().size();
  std::vector<torch::Tensor> tensors;
  std::vector<WorkHandle> handles;
  for (int i = 0; i < 8; ++i) {
    tensors.push_back(torch::full({1000 + i}, static_cast<double>(world().rank() + i)));
    handles.push_back(world().all_reduce_async(tensors.back(), ReduceOp::kSum));
  }
  auto blocking = torch::full({10}, 1.0);
  world().all_reduce(blocking, ReduceOp::kSum);  // must wait for the queued ones first
  for (auto& h : handles) EXPECT_TRUE(h->done());
  EXPECT_TRUE(torch::equal(blocking, torch::full({10}, static_cast<double>(n))));
  for (int i = 0; i < 8; ++i) {
    handles[i]->wait();
    double want = n * (n - 1) / 2.0 + static_cast<double>(n) * i;
    EXPECT_TRUE(torch::equal(tensors[i], torch::full({1000 + i}, want))) << i;
  }
  auto avg = torch::full({7}, static_cast<double>(world().rank()));
  auto h = world().all_reduce_async(avg, ReduceOp::kAvg);
  h->wait();
  EXPECT_TRUE(torch::allclose(avg, torch::full({7}, (n - 1) / 2.0)));
}

TEST(MpiCommunicator, AsyncErrorSurfacesInWait) {
  auto t = torch::ones({4}, torch::kLong);
  auto h = world().all_reduce_async(t, ReduceOp::kAvg);
  EXPECT_THROW(h->wait(), CommError);
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  const int n = world().size();
  for (int root = 0; root < n; ++root) {
    for (auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kInt}) {
      auto t = torch::full({4, 3}, world().rank() * 10 + 1, torch::TensorOptions().dtype(dtype));
      world().broadcast(t, root);
      EXPECT_TRUE(torch::equal(t, torch::full({4, 3}, root * 10 + 1, t.options()))) << root;
    }
    auto base = torch::full({3, 4}, static_cast<float>(world().rank()));
    auto view = base.t();
    world().broadcast(view, root);
    EXPECT_TRUE(torch::equal(base, torch::full({3, 4}, static_cast<float>(root))));
  }
  auto t = torch::ones({2});
  EXPECT_THROW(world().broadcast(t, n), CommError);
}

TEST(MpiCommunicator, AllGatherConcatenatesInRankOrder) {
  const int n = world().size();
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kLong}) {
    auto t = torch::full({2, 3}, world().rank(), torch::TensorOptions().dtype(dtype));
    auto all = world().all_gather(t);
    ASSERT_EQ(all.sizes(), (std::vector<int64_t>{2 * n, 3}));
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(
          torch::equal(all.slice(0, 2 * r, 2 * r + 2), torch::full({2, 3}, r, t.options())));
    }
  }
  auto view = torch::arange(6, torch::kFloat).reshape({2, 3}).t() + world().rank();
  auto gathered = world().all_gather(view);
  EXPECT_TRUE(
      torch::equal(gathered.slice(0, 0, 3), torch::arange(6, torch::kFloat).reshape({2, 3}).t()));
}

TEST(MpiCommunicator, ReduceScatterReturnsThisRanksChunk) {
  const int n = world().size();
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kInt}) {
    auto rows = torch::arange(2 * n, torch::kDouble).unsqueeze(1).repeat({1, 3}) + 1;
    auto input = (rows * (world().rank() + 1)).to(dtype);
    auto out = world().reduce_scatter(input, ReduceOp::kSum);
    ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(out.scalar_type(), dtype);
    auto want = rows.slice(0, 2 * world().rank(), 2 * world().rank() + 2) * (n * (n + 1) / 2.0);
    expect_equal(out, want, c10::toString(dtype));
  }
  auto bad = torch::ones({2 * n + 1});
  if (n > 1) {
    EXPECT_THROW(world().reduce_scatter(bad, ReduceOp::kSum), CommError);
  }
}

TEST(MpiCommunicator, InPlaceReduceScatterLeavesTheReducedChunkAtThisRanksPosition) {
  const int n = world().size();
  const int me = world().rank();
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kInt}) {
    for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      if (op == ReduceOp::kAvg && dtype == torch::kInt) continue;
      // Element i of rank r: (r + 1) * (i + 1); 3 elements per chunk.
      auto values = torch::arange(1, 3 * n + 1, torch::kDouble);
      auto buffer = (values * (me + 1)).to(dtype);
      auto work = world().reduce_scatter_in_place_async(buffer, op);
      work->wait();
      EXPECT_EQ(buffer.scalar_type(), dtype);
      const double factor = op == ReduceOp::kSum   ? n * (n + 1) / 2.0
                            : op == ReduceOp::kAvg ? (n + 1) / 2.0
                                                   : static_cast<double>(n);
      expect_equal(buffer.narrow(0, 3 * me, 3), values.narrow(0, 3 * me, 3) * factor,
                   str(c10::toString(dtype), " ", reduce_op_name(op)));
    }
  }
  auto odd = torch::ones({3 * n + 1});
  if (n > 1) {
    EXPECT_THROW(world().reduce_scatter_in_place_async(odd, ReduceOp::kSum)->wait(), CommError);
  }
  auto strided = torch::ones({4 * n, 2}).select(1, 0);
  EXPECT_THROW(world().reduce_scatter_in_place_async(strided, ReduceOp::kSum)->wait(), CommError);
}

TEST(MpiCommunicator, InPlaceAllGatherFillsEveryChunkFromItsRank) {
  const int n = world().size();
  const int me = world().rank();
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kLong}) {
    // Only this rank's chunk holds its values; the rest is garbage the gather must overwrite.
    auto buffer = torch::full({4 * n}, -7, torch::TensorOptions().dtype(dtype));
    buffer.narrow(0, 4 * me, 4).copy_(torch::arange(4, torch::kDouble) + 10 * me);
    auto work = world().all_gather_in_place_async(buffer);
    work->wait();
    for (int r = 0; r < n; ++r) {
      expect_equal(buffer.narrow(0, 4 * r, 4), torch::arange(4, torch::kDouble) + 10 * r,
                   str(c10::toString(dtype), " chunk ", r));
    }
  }
  // Issue order holds across the two kinds and all_reduce.
  auto a = torch::full({2 * n}, static_cast<float>(me + 1));
  auto b = torch::full({2 * n}, 0.0f);
  b.narrow(0, 2 * me, 2).fill_(static_cast<float>(me));
  auto w1 = world().reduce_scatter_in_place_async(a, ReduceOp::kSum);
  auto w2 = world().all_gather_in_place_async(b);
  w2->wait();
  EXPECT_TRUE(w1->done());
  EXPECT_FLOAT_EQ(a[2 * me].item<float>(), n * (n + 1) / 2.0f);
  EXPECT_FLOAT_EQ(b[2 * (n - 1)].item<float>(), static_cast<float>(n - 1));
}

TEST(MpiCommunicator, RejectsUnsupportedInput) {
  auto complex = torch::ones({2}, torch::kComplexFloat);
  EXPECT_THROW(world().all_reduce(complex, ReduceOp::kSum), CommError);
  world().barrier();
}

}  // namespace
}  // namespace hpctrain::comm
