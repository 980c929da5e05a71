// The data-parallel strategies' building blocks (parallel/data_parallel_strategy.hpp): the unit
// layout of full sharding (which chunk each rank owns, padding), the packed pieces of owned
// ranges, and a fully sharded model's storage over the world as a dp group: each rank keeps its
// chunk of each unit, the gathered parameters are the model's, and a unit list that names a
// parameter the model lacks (or one twice) is a config error naming the model on every rank,
// before any collective (no rank waits for another).

#include "hpctrain/parallel/data_parallel_strategy.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::parallel {
namespace {

TEST(UnitLayout, MembersBackToBackPaddedToTheShardCount) {
  const auto spans = layout_units({{3, 5}, {1}, {8}, {}}, 4);
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[0].offsets, (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(spans[0].numel, 8);  // 3 + 5: no padding
  EXPECT_EQ(spans[0].chunk, 2);
  EXPECT_EQ(spans[0].owned_offset(3), 6);
  EXPECT_EQ(spans[1].numel, 4);  // one element, padded so every rank owns one
  EXPECT_EQ(spans[1].chunk, 1);
  EXPECT_EQ(spans[2].numel, 8);
  EXPECT_EQ(spans[3].numel, 4);  // an empty unit still gives each rank an element
  const auto one = layout_units({{7}}, 1);
  EXPECT_EQ(one[0].numel, 7);
  EXPECT_EQ(one[0].chunk, 7);
  const auto three = layout_units({{7, 2}}, 3);
  EXPECT_EQ(three[0].numel, 9);
  EXPECT_EQ(three[0].owned_offset(2), 6);
  EXPECT_THROW(layout_units({{1}}, 0), Error);
}

TEST(PackedOverlap, PiecesOfARangeInThePackedOwnedChunks) {
  // Owned: layout [2, 5) and [10, 14), packed as [0, 3) and [3, 7).
  const std::vector<std::pair<std::int64_t, std::int64_t>> owned{{2, 3}, {10, 4}};
  using Pieces = std::vector<std::pair<std::int64_t, std::int64_t>>;
  EXPECT_EQ(packed_overlap(owned, 0, 2), Pieces{});
  EXPECT_EQ(packed_overlap(owned, 4, 8), (Pieces{{2, 1}, {3, 2}}));
  EXPECT_EQ(packed_overlap(owned, 0, 20), (Pieces{{0, 3}, {3, 4}}));
}

struct TwoLayers : torch::nn::Module {
  TwoLayers() {
    fc0 = register_module("fc0", torch::nn::Linear(5, 3));
    fc1 = register_module("fc1", torch::nn::Linear(3, 1));
  }
  torch::nn::Linear fc0{nullptr}, fc1{nullptr};
};

StrategyInputs inputs_for(TwoLayers& model, std::vector<std::vector<std::string>> units) {
  StrategyInputs in(model, "two-layers");
  in.units = std::move(units);
  in.config.shard = ShardMode::kFull;
  in.dp = std::make_shared<comm::MpiCommunicator>(MPI_COMM_WORLD, "dp", /*async_thread=*/true);
  in.tp = std::make_shared<comm::MpiCommunicator>(MPI_COMM_SELF, "tp", /*async_thread=*/false);
  in.dp_control = std::make_shared<comm::ControlPlane>(MPI_COMM_WORLD, "dp");
  return in;
}

TEST(FullySharded, EachRankKeepsItsChunkOfEachUnit) {
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  torch::manual_seed(11 + rank);  // each rank starts different: dp rank 0's values win
  TwoLayers model;
  auto strategy = make_strategy(inputs_for(model, {{"fc0.weight", "fc0.bias"}}));
  EXPECT_EQ(strategy->mode(), ShardMode::kFull);
  // Unit 0 (fc0: 15 + 3) and the root (fc1: 3 + 1), each padded to a multiple of the size.
  const auto spans = layout_units({{15, 3}, {3, 1}}, size);
  const auto segments = strategy->segments();
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].params.numel(), spans[0].chunk + spans[1].chunk);
  EXPECT_EQ(strategy->parameter_bytes(), 4 * (spans[0].chunk + spans[1].chunk));
  strategy->parameters_ready();
  const torch::Tensor master = strategy->master_parameters();
  ASSERT_EQ(master.numel(), spans[0].numel + spans[1].numel);
  for (const auto& e : strategy->layout()) {
    const torch::Tensor mine = master.narrow(0, e.offset, e.numel);
    EXPECT_TRUE(torch::equal(mine, e.param.detach().reshape(-1))) << e.name;
    torch::Tensor first = mine.clone();
    MPI_Bcast(first.data_ptr(), static_cast<int>(first.numel()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_TRUE(torch::equal(first, mine)) << e.name << " differs from dp rank 0's";
  }
  // This rank's chunk of unit 0 is its owned part, at its place in the layout.
  EXPECT_TRUE(torch::equal(segments[0].params.narrow(0, 0, spans[0].chunk),
                           master.narrow(0, spans[0].owned_offset(rank), spans[0].chunk)));
}

TEST(FullySharded, UnitsNamingAMissingOrRepeatedParameterAreAConfigErrorOnEveryRank) {
  TwoLayers model;
  try {
    make_strategy(inputs_for(model, {{"fc0.weight"}, {"fc2.weight"}}));
    FAIL() << "a unit naming a missing parameter was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model two-layers"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fc2.weight"), std::string::npos) << e.what();
  }
  try {
    make_strategy(inputs_for(model, {{"fc0.weight"}, {"fc0.weight", "fc0.bias"}}));
    FAIL() << "a parameter in two units was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is in units 0 and 1"), std::string::npos) << e.what();
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every rank got here: none waits in a collective
}

}  // namespace
}  // namespace hpctrain::parallel
