// TorchScript models without MPI: modules scripted by /usr/bin/python3 (python3-torch) into a
// scratch directory, loaded as hpctrain models. Checks that parameters and buffers carry their
// PyTorch state_dict names, that FlatParameters re-points the scripted module's own tensors (a
// write into the flat buffer changes forward; backward fills the flat gradient buffer with the
// gradients autograd gives the untouched module), that train()/eval() reach dropout, the
// profiler FLOP count, and the load and signature errors.

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "../../support/test_util.hpp"
#include "hpctrain/model/task_loss.hpp"
#include "hpctrain/model/torchscript_model.hpp"
#include "hpctrain/parallel/flat_parameters.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::model {
namespace {

const char* kScript = R"PY(
import sys, torch, torch.nn as nn, torch.nn.functional as F
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(16)
        self.fc = nn.Linear(16, 16)
    def forward(self, x):
        return x + self.fc(F.relu(self.norm(x)))
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(12, 16)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.drop = nn.Dropout(0.5)
        self.out = nn.Linear(16, 3)
    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(self.drop(x))
class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
    def forward(self, x, y):
        return self.fc(x) + y
torch.manual_seed(0)
torch.jit.script(Net()).save(sys.argv[1] + "/net.pt")
torch.jit.script(Two()).save(sys.argv[1] + "/two.pt")
print(",".join(n for n, _ in Net().state_dict().items()))
)PY";

class TorchScriptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(hpctrain::testing::make_temp_dir("torchscript"));
    std::ofstream(*dir_ + "/make.py") << kScript;
    const std::string command =
        "/usr/bin/python3 " + *dir_ + "/make.py " + *dir_ + " > " + *dir_ + "/names.txt";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(*dir_ + "/names.txt");
    std::getline(in, *(names_ = new std::string()));
  }
  static std::shared_ptr<TorchScriptModel> load(const std::string& file) {
    TorchScriptOptions options;
    options.file = *dir_ + "/" + file;
    options.task = Task::kClassification;
    return std::make_shared<TorchScriptModel>(options);
  }
  static std::string* dir_;
  static std::string* names_;  // the Python module's state_dict names, comma-separated
};
std::string* TorchScriptTest::dir_ = nullptr;
std::string* TorchScriptTest::names_ = nullptr;

TEST_F(TorchScriptTest, NamesAreTheStateDictNames) {
  auto model = load("net.pt");
  // state_dict order: parameters and buffers per module; compare as sets of names.
  std::set<std::string> ours, python;
  for (const auto& p : model->named_parameters(true)) ours.insert(p.key());
  for (const auto& b : model->named_buffers(true)) ours.insert(b.key());
  std::stringstream in(*names_);
  for (std::string n; std::getline(in, n, ',');) python.insert(n);
  EXPECT_EQ(ours, python);
  EXPECT_TRUE(ours.count("blocks.1.norm.running_var"));
  EXPECT_EQ(model->named_buffers(true).size(), 6u);  // 2 x (mean, var, num_batches_tracked)
}

TEST_F(TorchScriptTest, FlatBufferHoldsTheModulesTensorsAndGradients) {
  auto model = load("net.pt");
  auto reference = torch::jit::load(*dir_ + "/net.pt");
  model->eval();  // no dropout, running statistics: forward is deterministic
  reference.eval();
  parallel::FlatParameters flat(*model);
  torch::manual_seed(1);
  auto x = torch::randn({5, 12});
  auto y = torch::tensor({0, 1, 2, 1, 0}, torch::kLong);

  auto out = model->forward(x);
  auto ref_out = reference.forward({x}).toTensor();
  EXPECT_TRUE(torch::equal(out, ref_out));
  model->loss(out, y).loss.backward();
  std::vector<torch::Tensor> ref_params;
  std::vector<std::string> ref_names;
  for (const auto& p : reference.named_parameters(true)) {
    ref_params.push_back(p.value);
    ref_names.push_back(p.name);
  }
  auto ref_loss = classification_loss(ref_out, y).loss;
  auto ref_grads = torch::autograd::grad({ref_loss}, ref_params);
  EXPECT_GT(flat.grads().abs().sum().item<double>(), 0);
  for (std::size_t i = 0; i < ref_names.size(); ++i) {
    const auto& e = flat.entry(ref_names[i]);
    auto slot = flat.grads().narrow(0, e.offset, e.numel).view(ref_grads[i].sizes());
    EXPECT_TRUE(torch::allclose(slot, ref_grads[i], 1e-6, 1e-7)) << ref_names[i];
  }
  // A write into the flat buffer is a write into the scripted module's parameter.
  {
    torch::NoGradGuard no_grad;
    const auto& e = flat.entry("out.bias");
    flat.params().narrow(0, e.offset, e.numel).add_(1.0);
  }
  auto shifted = model->forward(x);
  EXPECT_TRUE(torch::allclose(shifted, out + 1.0, 1e-5, 1e-5));
  auto slot = torch::jit::Module(model->module().attr("out").toObject()).attr("bias").toTensor();
  EXPECT_EQ(slot.data_ptr<float>(),
            flat.params().data_ptr<float>() + flat.entry("out.bias").offset);
}

TEST_F(TorchScriptTest, TrainAndEvalReachDropoutAndBatchNorm) {
  auto model = load("net.pt");
  auto x = torch::randn({8, 12});
  model->eval();
  EXPECT_FALSE(model->module().is_training());
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(model->forward(x), model->forward(x)));
  auto mean_before = model->named_buffers(true)["blocks.0.norm.running_mean"].clone();
  model->train();
  EXPECT_TRUE(model->module().is_training());
  EXPECT_FALSE(torch::equal(model->forward(x), model->forward(x)));  // dropout draws
  // BatchNorm in training mode updates the registered buffer itself.
  EXPECT_FALSE(torch::equal(model->named_buffers(true)["blocks.0.norm.running_mean"], mean_before));
}

TEST_F(TorchScriptTest, CheckBatchCountsFlopsInEvalModeAndChecksShapes) {
  auto model = load("net.pt");
  model->train();
  auto mean_before = model->named_buffers(true)["blocks.0.norm.running_mean"].clone();
  model->check_batch(torch::randn({4, 12}), torch::zeros({4}, torch::kLong), 3, "data.train");
  EXPECT_TRUE(model->is_training());  // restored
  EXPECT_TRUE(torch::equal(model->named_buffers(true)["blocks.0.norm.running_mean"], mean_before));
  // Four linear layers as addmm: 2 x (12*16 + 16*16 + 16*16 + 16*3) per sample.
  EXPECT_DOUBLE_EQ(model->forward_flops_per_sample(), 2.0 * (12 * 16 + 2 * 16 * 16 + 16 * 3));
  EXPECT_EQ(model->flops_source(), "profiler (matrix products and convolutions)");
  const std::string classes = hpctrain::testing::error_of<ConfigError>([&] {
    model->check_batch(torch::randn({4, 12}), torch::zeros({4}, torch::kLong), 5, "data.val");
  });
  EXPECT_NE(classes.find("returned [4, 3] Float, but a classification model returns logits "
                         "[4, C] with C >= 5 classes"),
            std::string::npos)
      << classes;
  const std::string inputs = hpctrain::testing::error_of<ConfigError>([&] {
    model->check_batch(torch::randn({4, 7}), torch::zeros({4}, torch::kLong), 3, "data.train");
  });
  EXPECT_NE(inputs.find("forward failed on the inputs of data.train (shape [4, 7] Float)"),
            std::string::npos)
      << inputs;
}

TEST_F(TorchScriptTest, LoadErrors) {
  std::ofstream(*dir_ + "/text.pt") << "not a module\n";
  const std::string text = hpctrain::testing::error_of<ConfigError>([&] { load("text.pt"); });
  EXPECT_NE(text.find("is not a TorchScript module"), std::string::npos) << text;
  const std::string two = hpctrain::testing::error_of<ConfigError>([&] { load("two.pt"); });
  EXPECT_NE(two.find("self, Tensor x, Tensor y) -> Tensor but hpctrain calls forward(inputs: "
                     "Tensor) -> Tensor"),
            std::string::npos)
      << two;
  Config config = Config::parse("model: {name: torchscript, file: /nonexistent.pt}", "<test>");
  auto section = config.section("model");
  const std::string missing =
      hpctrain::testing::error_of<ConfigError>([&] { build_model(section, ModelContext{}); });
  EXPECT_NE(missing.find("model.file = '/nonexistent.pt': no such file"), std::string::npos)
      << missing;
  Config tp = Config::parse("model: {name: torchscript, file: " + *dir_ + "/net.pt}", "<test>");
  auto tp_section = tp.section("model");
  ModelContext ctx;
  ctx.tp_size = 2;
  const std::string tp_error =
      hpctrain::testing::error_of<ConfigError>([&] { build_model(tp_section, ctx); });
  EXPECT_NE(tp_error.find("data parallel only"), std::string::npos) << tp_error;
}

}  // namespace
}  // namespace hpctrain::model
