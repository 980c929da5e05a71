// Point-to-point messages on the MPI data plane (Communicator::send_recv_async): values, dtypes,
// order between a pair of ranks, errors, and every message of the pipeline schedules of
// plan/pipeline_schedule.hpp carried over real ranks (each received tensor names the micro-batch
// and stage its sender meant), for pp = the world size.

#include <gtest/gtest.h>

#include <map>

#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::comm {
namespace {

MpiCommunicator& group() {
  static MpiCommunicator comm(MPI_COMM_WORLD, "pp", /*async_thread=*/true);
  return comm;
}

int next_rank() {
  return (group().rank() + 1) % group().size();
}
int previous_rank() {
  return (group().rank() + group().size() - 1) % group().size();
}

TEST(P2P, RingExchangeInOneBatchEveryDtype) {
  if (group().size() == 1) GTEST_SKIP() << "no other rank to message";
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16, torch::kHalf, torch::kLong,
                     torch::kByte, torch::kBool}) {
    const int me = group().rank();
    auto out = (torch::arange(12, torch::kDouble).view({3, 4}) * 0 + me + 1).to(dtype);
    auto in = torch::zeros({3, 4}, dtype);
    auto work = group().send_recv_async(
        {P2PMessage::send(out, next_rank()), P2PMessage::recv(in, previous_rank())});
    work->wait();
    EXPECT_TRUE(work->done());
    const double want = dtype == torch::kBool ? 1.0 : previous_rank() + 1.0;
    EXPECT_TRUE(torch::equal(in.to(torch::kDouble), torch::full({3, 4}, want, torch::kDouble)))
        << c10::toString(dtype) << "\n"
        << in;
  }
}

TEST(P2P, MessagesToOnePeerMatchInPostingOrder) {
  if (group().size() == 1) GTEST_SKIP() << "no other rank to message";
  // Three messages of one size to the same peer in one batch, and two across batches: each
  // arrives in the receive posted in the same position.
  const int me = group().rank();
  std::vector<torch::Tensor> out, in;
  std::vector<P2PMessage> batch;
  for (int k = 0; k < 3; ++k) {
    out.push_back(torch::full({64}, 100.0f * me + k));
    in.push_back(torch::zeros({64}));
  }
  for (int k = 0; k < 3; ++k) batch.push_back(P2PMessage::send(out[k], next_rank()));
  for (int k = 0; k < 3; ++k) batch.push_back(P2PMessage::recv(in[k], previous_rank()));
  group().send_recv_async(batch)->wait();
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(in[k][0].item<float>(), 100.0f * previous_rank() + k) << "message " << k;
  }
  // Three sends in one batch received one by one in three batches (so a batch that posted its
  // messages in another order would deliver them in that order).
  if (me == 0) {
    std::vector<P2PMessage> sends;
    for (int k = 0; k < 3; ++k) sends.push_back(P2PMessage::send(torch::full({4096}, 7.0f + k), 1));
    group().send_recv_async(sends)->wait();
  } else if (me == 1) {
    for (int k = 0; k < 3; ++k) {
      auto in = torch::zeros({4096});
      group().recv(in, 0);
      EXPECT_EQ(in[4095].item<float>(), 7.0f + k) << "message " << k;
    }
  }
  // Blocking forms along a chain 0 -> 1 -> ... -> n-1: each rank adds its rank and passes on.
  auto value = torch::zeros({5}, torch::kDouble);
  if (me > 0) group().recv(value, me - 1);
  value += me;
  if (me + 1 < group().size()) group().send(value, me + 1);
  if (me == group().size() - 1) {
    const double n = group().size();
    EXPECT_EQ(value[4].item<double>(), n * (n - 1) / 2);
  }
}

TEST(P2P, LargeMessageAndEmptyMessage) {
  if (group().size() == 1) GTEST_SKIP() << "no other rank to message";
  auto out = torch::arange(3 << 20, torch::kFloat) + group().rank();  // 12 MiB: rendezvous
  auto in = torch::empty_like(out);
  auto empty_out = torch::empty({0, 7});
  auto empty_in = torch::empty({0, 7});
  group()
      .send_recv_async(
          {P2PMessage::send(out, next_rank()), P2PMessage::send(empty_out, next_rank()),
           P2PMessage::recv(in, previous_rank()), P2PMessage::recv(empty_in, previous_rank())})
      ->wait();
  EXPECT_TRUE(torch::equal(in, torch::arange(3 << 20, torch::kFloat) + previous_rank()));
}

TEST(P2P, BadMessagesAreLocalErrors) {
  const int me = group().rank();
  auto t = torch::zeros({4});
  EXPECT_THROW(group().send_recv_async({P2PMessage::send(t, me)}), CommError);  // itself
  EXPECT_THROW(group().send_recv_async({P2PMessage::recv(t, group().size())}), CommError);
  EXPECT_THROW(group().send_recv_async({P2PMessage::recv(t, -1)}), CommError);
  if (group().size() > 1) {
    auto strided = torch::zeros({4, 4}).t();
    EXPECT_THROW(group().send_recv_async({P2PMessage::send(strided, next_rank())}), CommError);
    EXPECT_THROW(group().send_recv_async({P2PMessage::send(torch::Tensor(), next_rank())}),
                 CommError);
  }
  // Nothing was posted: the ranks still meet.
  group().barrier();
}

TEST(P2P, ShortMessageIsAnErrorOnTheReceiver) {
  if (group().size() < 2) GTEST_SKIP() << "needs two ranks";
  const int me = group().rank();
  if (me == 0) {
    group().send(torch::ones({4}), 1);
  } else if (me == 1) {
    auto in = torch::zeros({8});
    try {
      group().recv(in, 0);
      ADD_FAILURE() << "a 16-byte message into a 32-byte receive was accepted";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("got 16 bytes, expected 32"), std::string::npos)
          << e.what();
    }
  }
  group().barrier();
}

// Every message of a schedule, as the executor posts them: batches of consecutive joined
// messages, each send carrying [micro-batch, stage of the receiver, kind] and each receive
// checking that it got what its own action names. Rendezvous-free ordering mistakes (two sends
// swapped) would show as a mismatch here.
void run_schedule_messages(const plan::PipelineShape& shape) {
  const plan::PipelineSchedule schedule = plan::make_pipeline_schedule(shape);
  const int me = group().rank();
  const auto& actions = schedule.ranks[static_cast<std::size_t>(me)];
  std::size_t i = 0;
  int received = 0;
  while (i < actions.size()) {
    if (!actions[i].is_message()) {
      ++i;
      continue;
    }
    std::vector<P2PMessage> batch;
    std::vector<std::pair<torch::Tensor, plan::PipelineAction>> receives;
    do {
      const plan::PipelineAction& a = actions[i];
      const bool activation = a.kind == plan::PipelineActionKind::kSendActivation ||
                              a.kind == plan::PipelineActionKind::kRecvActivation;
      if (a.is_send()) {
        // The stage the message is for: the next stage for an activation, the previous for a
        // gradient.
        const int target = activation ? a.stage + 1 : a.stage - 1;
        batch.push_back(
            P2PMessage::send(torch::tensor({static_cast<double>(a.micro_batch),
                                            static_cast<double>(target), activation ? 1.0 : 2.0},
                                           torch::kDouble),
                             a.peer));
      } else {
        auto in = torch::full({3}, -1.0, torch::kDouble);
        batch.push_back(P2PMessage::recv(in, a.peer));
        receives.emplace_back(in, a);
      }
      ++i;
    } while (i < actions.size() && actions[i].is_message() && actions[i].joined);
    group().send_recv_async(batch)->wait();
    for (const auto& [in, a] : receives) {
      const bool activation = a.kind == plan::PipelineActionKind::kRecvActivation;
      EXPECT_EQ(in[0].item<double>(), a.micro_batch) << a.text(shape.virtual_stages);
      EXPECT_EQ(in[1].item<double>(), a.stage) << a.text(shape.virtual_stages);
      EXPECT_EQ(in[2].item<double>(), activation ? 1.0 : 2.0) << a.text(shape.virtual_stages);
      ++received;
    }
  }
  // Each stage but the first receives m activations, each but the last m gradients.
  const int stages = shape.stages();
  int want = 0;
  for (int c = 0; c < shape.virtual_stages; ++c) {
    const int stage = c * shape.pp + me;
    want += (stage > 0 ? shape.micro_batches : 0) +
            (!shape.forward_only && stage < stages - 1 ? shape.micro_batches : 0);
  }
  EXPECT_EQ(received, want);
}

TEST(P2P, EveryPipelineScheduleRunsOverRealRanks) {
  const int pp = group().size();
  if (pp == 1) GTEST_SKIP() << "a pipeline needs two ranks";
  using Kind = plan::PipelineScheduleKind;
  for (int m : {1, pp, 3 * pp}) {
    for (Kind kind : {Kind::kGpipe, Kind::kOneFOneB}) {
      for (bool forward_only : {false, true}) {
        SCOPED_TRACE(plan::pipeline_schedule_name(kind) + std::string(" m=") + std::to_string(m));
        run_schedule_messages({pp, 1, m, kind, forward_only});
      }
    }
    if (m % pp == 0) {
      for (int v : {2, 3}) {
        SCOPED_TRACE("interleaved V=" + std::to_string(v) + " m=" + std::to_string(m));
        run_schedule_messages({pp, v, m, Kind::kInterleaved, false});
        run_schedule_messages({pp, v, m, Kind::kInterleaved, true});
      }
    }
  }
}

}  // namespace
}  // namespace hpctrain::comm
