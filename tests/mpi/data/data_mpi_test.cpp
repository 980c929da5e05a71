// The data layer on real ranks (registered at 1, 2, 3 and 4): what every rank reads, gathered,
// forms the same global stream at every world size; training sees each sample once per epoch
// (minus the drop_last remainder), evaluation exactly once; tensor-parallel ranks read the same
// samples; a bad file is an error on every rank before any collective.

#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <algorithm>
#include <numeric>

#include "../../support/mpi_test_util.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/data/eval_loader.hpp"
#include "hpctrain/data/train_loader.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::data {
namespace {

constexpr std::int64_t kSamples = 103;  // prime: uneven shards and remainders at every size
constexpr std::int64_t kClasses = 7;

using hpctrain::testing::world_rank;
using hpctrain::testing::world_size;

// One file for the whole test program: rank 0 writes it, every rank opens it. Sample i has
// inputs {i, -i} (float32) and label i mod 7, so a batch tells which samples it holds.
const std::string& shared_file() {
  static const std::string path = [] {
    const std::string dir = hpctrain::testing::shared_temp_dir("data_mpi");
    if (world_rank() == 0) {
      auto i = torch::arange(kSamples, torch::kFloat);
      auto inputs = torch::stack({i, -i}, 1);
      auto labels = torch::arange(kSamples, torch::kLong) % kClasses;
      write_classification_file(dir + "/d.h5", inputs, labels, kClasses, 1.0,
                                {"mpi test", "data_mpi_test"});
    }
    MPI_Barrier(MPI_COMM_WORLD);  // written before any rank opens it
    return dir + "/d.h5";
  }();
  return path;
}

// The sample ids of a batch, checked against its labels and its reported indices.
std::vector<std::int64_t> ids_of(const Batch& batch) {
  std::vector<std::int64_t> ids;
  for (std::int64_t k = 0; k < batch.size(); ++k) {
    const auto id = static_cast<std::int64_t>(batch.inputs[k][0].item<float>());
    EXPECT_EQ(batch.inputs[k][1].item<float>(), -static_cast<float>(id));
    EXPECT_EQ(batch.targets[k].item<std::int64_t>(), id % kClasses);
    EXPECT_EQ(batch.indices[static_cast<std::size_t>(k)], id);
    ids.push_back(id);
  }
  return ids;
}

// Every rank's `local` (same length on every rank), concatenated in rank order on every rank.
std::vector<std::int64_t> all_gather(const std::vector<std::int64_t>& local, MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  std::vector<std::int64_t> out(local.size() * static_cast<std::size_t>(n));
  MPI_Allgather(local.data(), static_cast<int>(local.size()), MPI_INT64_T, out.data(),
                static_cast<int>(local.size()), MPI_INT64_T, comm);
  return out;
}

// Every rank's `local` (any length), concatenated in rank order on every rank.
std::vector<std::int64_t> all_gather_v(const std::vector<std::int64_t>& local) {
  int n = world_size();
  int count = static_cast<int>(local.size());
  std::vector<int> counts(static_cast<std::size_t>(n)), offsets(static_cast<std::size_t>(n));
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), 0);
  std::vector<std::int64_t> out(static_cast<std::size_t>(offsets.back() + counts.back()));
  MPI_Allgatherv(local.data(), count, MPI_INT64_T, out.data(), counts.data(), offsets.data(),
                 MPI_INT64_T, MPI_COMM_WORLD);
  return out;
}

// The world-size-independent reference: global batches straight from the epoch permutations.
std::vector<std::int64_t> reference_stream(std::int64_t global_batch, std::int64_t steps,
                                           std::uint64_t seed) {
  std::vector<std::int64_t> out;
  std::int64_t epoch = 0, offset = 0;
  for (std::int64_t s = 0; s < steps; ++s) {
    if (offset + global_batch > kSamples) {
      ++epoch;
      offset = 0;
    }
    auto order = epoch_permutation(kSamples, seed, epoch);
    out.insert(out.end(), order.begin() + offset, order.begin() + offset + global_batch);
    offset += global_batch;
  }
  return out;
}

// What this rank reads in `steps` training steps, gathered per step into global batches.
std::vector<std::int64_t> gathered_stream(std::int64_t per_rank, std::int64_t steps,
                                          std::uint64_t seed, int prefetch) {
  auto dataset = Dataset::open(shared_file());
  TrainSampler sampler(kSamples, per_rank * world_size(), seed, true);
  TrainLoader loader(*dataset, sampler, {}, world_rank(), world_size(), prefetch, steps);
  std::vector<std::int64_t> stream;
  Batch batch;
  while (loader.next(batch)) {
    EXPECT_EQ(batch.size(), per_rank);
    auto global = all_gather(ids_of(batch), MPI_COMM_WORLD);
    stream.insert(stream.end(), global.begin(), global.end());
  }
  EXPECT_EQ(loader.state().global_step, steps);
  EXPECT_EQ(loader.state().consumed_samples, steps * per_rank * world_size());
  return stream;
}

TEST(DataMpi, SameGlobalStreamAtEveryWorldSize) {
  // A global batch of 12 divides among 1, 2, 3 and 4 ranks; 20 steps cross two epoch ends.
  const std::int64_t steps = 20;
  auto stream = gathered_stream(12 / world_size(), steps, 11, /*prefetch=*/2);
  EXPECT_EQ(stream, reference_stream(12, steps, 11));
  // Inline reads give the same stream.
  EXPECT_EQ(gathered_stream(12 / world_size(), steps, 11, 0), stream);
}

TEST(DataMpi, FixedPerRankBatchFollowsTheSameOrder) {
  // With 5 samples per rank the global batch grows with the world, but within an epoch the
  // stream is the same prefix of the epoch's order.
  const std::int64_t global = 5 * world_size();
  const std::int64_t steps = kSamples / global;
  auto stream = gathered_stream(5, steps, 4, 3);
  auto order = epoch_permutation(kSamples, 4, 0);
  EXPECT_EQ(stream, std::vector<std::int64_t>(order.begin(), order.begin() + steps * global));
}

TEST(DataMpi, TrainingSeesEverySampleOncePerEpochMinusDropLast) {
  const std::int64_t per_rank = 4, global = per_rank * world_size();
  const std::int64_t steps_per_epoch = kSamples / global;
  auto stream = gathered_stream(per_rank, 2 * steps_per_epoch, 8, 2);
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::int64_t> seen(stream.begin() + epoch * steps_per_epoch * global,
                                   stream.begin() + (epoch + 1) * steps_per_epoch * global);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "duplicate in epoch";
    // The samples not seen are exactly the epoch order's tail, kSamples mod global of them.
    auto order = epoch_permutation(kSamples, 8, epoch);
    std::vector<std::int64_t> dropped(order.begin() + steps_per_epoch * global, order.end());
    std::sort(dropped.begin(), dropped.end());
    std::vector<std::int64_t> all(seen);
    all.insert(all.end(), dropped.begin(), dropped.end());
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> every(kSamples);
    std::iota(every.begin(), every.end(), 0);
    EXPECT_EQ(all, every);
    EXPECT_EQ(static_cast<std::int64_t>(dropped.size()), kSamples % global);
  }
}

TEST(DataMpi, EvaluationCoversEverySampleExactlyOnce) {
  auto dataset = Dataset::open(shared_file());
  for (std::int64_t batch_size : {1, 6, 1000}) {
    EvalShard shard(kSamples, world_rank(), world_size(), batch_size);
    EvalLoader loader(*dataset, shard, 2);
    std::vector<std::int64_t> mine;
    std::int64_t batches = 0;
    Batch batch;
    while (loader.next(batch)) {
      auto ids = ids_of(batch);
      mine.insert(mine.end(), ids.begin(), ids.end());
      ++batches;
    }
    EXPECT_EQ(batches, shard.num_batches());
    EXPECT_EQ(static_cast<std::int64_t>(mine.size()), shard.size());
    // Uneven counts, no padding: at most one sample apart.
    std::int64_t sizes[2] = {-shard.size(), shard.size()};
    MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_LE(sizes[1] + sizes[0], 1);
    std::int64_t most = batches;
    MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(most, shard.max_batches_over_ranks());
    auto all = all_gather_v(mine);
    std::vector<std::int64_t> every(kSamples);
    std::iota(every.begin(), every.end(), 0);
    EXPECT_EQ(all, every) << "batch " << batch_size;  // rank order = index order, each once
  }
}

TEST(DataMpi, TensorParallelRanksReadTheSameSamples) {
  const int tp = world_size() % 2 == 0 ? 2 : world_size();
  runtime::ProcessGrid grid(*runtime::Runtime::current(), tp);
  auto dataset = Dataset::open(shared_file());
  TrainSampler sampler(kSamples, 3 * grid.dp_size(), 5, true);
  TrainLoader loader(*dataset, sampler, {}, grid.dp_rank(), grid.dp_size(), 2, 10);
  Batch batch;
  std::vector<std::int64_t> stream;
  while (loader.next(batch)) {
    auto mine = ids_of(batch);
    auto group = all_gather(mine, grid.tp_comm());
    for (int r = 0; r < tp; ++r) {
      EXPECT_TRUE(std::equal(mine.begin(), mine.end(), group.begin() + r * 3)) << "tp rank " << r;
    }
    // Across data-parallel ranks the slices form the global batch.
    auto global = all_gather(mine, grid.dp_comm());
    stream.insert(stream.end(), global.begin(), global.end());
  }
  EXPECT_EQ(stream, reference_stream(3 * grid.dp_size(), 10, 5));
}

TEST(DataMpi, BadFilesFailOnEveryRankBeforeAnyCollective) {
  // Each rank validates alone; the flags are combined only after every rank has its error.
  DatasetExpectation expect;
  expect.config_key = "data.train";
  expect.min_samples = 1000;
  int failures = 0;
  for (const std::string& path : {shared_file() + ".missing", shared_file()}) {
    try {
      Dataset::open(path, expect);
    } catch (const DataError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find("data.train file '" + path + "'"), std::string::npos) << message;
      ++failures;
    }
  }
  EXPECT_EQ(failures, 2);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(total, 2 * world_size());
}

}  // namespace
}  // namespace hpctrain::data
