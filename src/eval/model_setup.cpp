#include "hpctrain/eval/model_setup.hpp"

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {

std::vector<checkpoint::TensorRecord> model_records(model::Model& model) {
  std::vector<checkpoint::TensorRecord> records;
  for (const auto& item : model.named_parameters(true)) {
    records.push_back({"model/" + item.key(), item.value().detach(), model.shard_info(item.key())});
  }
  for (const auto& item : model.named_buffers(true)) {  // BatchNorm statistics of user models
    records.push_back({"model/" + item.key(), item.value(), model.shard_info(item.key())});
  }
  return records;
}

void check_data_fits_model(model::Model& model, data::Dataset& dataset, const std::string& key,
                           std::int64_t vocab_size) {
  const auto& info = dataset.info();
  const std::string task = data::dataset_kind_name(info.kind);
  if (task != model.task()) {
    throw DataError(str(key, " = ", info.path, " holds ", task,
                        " data, but the checkpoint's model is a ", model.task(),
                        " model: evaluate it on a ", model.task(), " file"));
  }
  if (info.num_samples < 1) throw DataError(str(key, " = ", info.path, " holds no samples"));
  if (task == "language_model" && vocab_size > 0 && info.vocab_size > vocab_size) {
    throw DataError(str(key, " = ", info.path, " has a vocabulary of ", info.vocab_size,
                        " tokens but the checkpoint's model.vocab_size is ", vocab_size,
                        ": evaluate it on data made with its tokenizer"));
  }
  {
    // User models (TorchScript) check the shapes of their outputs; built-in models do nothing.
    data::Batch one = dataset.read_range(0, 1);
    auto device = model.parameters().front().device();
    model.check_batch(one.inputs.to(device), one.targets.to(device),
                      task == "language_model" ? info.vocab_size : info.num_classes, key);
  }
  if (task == "classification") {
    std::string shape;
    for (auto d : info.sample_shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    torch::Tensor outputs;
    try {
      torch::InferenceMode inference;
      data::Batch one = dataset.read_range(0, 1);
      outputs = model.forward(one.inputs.to(model.parameters().front().device()));
    } catch (const c10::Error& e) {
      throw DataError(str(key, " = ", info.path, ": samples of shape ", shape,
                          " do not fit the checkpoint's model (", e.what_without_backtrace(),
                          "): evaluate it on data shaped like its training data"));
    }
    if (info.num_classes > outputs.size(-1)) {
      throw DataError(str(key, " = ", info.path, " has ", info.num_classes,
                          " classes but the checkpoint's model outputs ", outputs.size(-1)));
    }
  }
}

}  // namespace hpctrain::eval
