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
                           std::int64_t vocab_size, FitAdvice advice, bool trial_forward) {
  const bool training = advice == FitAdvice::kTraining;
  const char* whose = training ? "the model" : "the checkpoint's model";
  const auto& info = dataset.info();
  const Task task = info.kind;
  if (task != model.task()) {
    throw DataError(str(key, " = ", info.path, " holds ", task_name(task), " data, but ", whose,
                        " is a ", task_name(model.task()), " model: ",
                        training ? str("point ", key, " at a matching file")
                                 : str("evaluate it on a ", task_name(model.task()), " file")));
  }
  if (info.num_samples < 1) throw DataError(str(key, " = ", info.path, " holds no samples"));
  if (task == Task::kLanguageModel && vocab_size > 0 && info.vocab_size > vocab_size) {
    throw DataError(training ? str(info.path, " has a vocabulary of ", info.vocab_size,
                                   " tokens but model.vocab_size = ", vocab_size,
                                   ": set model.vocab_size >= ", info.vocab_size)
                             : str(key, " = ", info.path, " has a vocabulary of ", info.vocab_size,
                                   " tokens but the checkpoint's model.vocab_size is ", vocab_size,
                                   ": evaluate it on data made with its tokenizer"));
  }
  data::Batch one = dataset.read_range(0, 1);
  const auto device = model.parameters().front().device();
  // User models (TorchScript) check the shapes of their outputs; built-in models do nothing.
  model.check_batch(one.inputs.to(device), one.targets.to(device),
                    task == Task::kLanguageModel ? info.vocab_size : info.num_classes, key);
  if (!trial_forward) return;
  // One sample through the forward pass (every rank of a tp group alike: tensor-parallel layers
  // communicate inside it), in evaluation mode: the trial neither draws dropout randomness nor
  // updates batch statistics.
  std::string shape;
  for (auto d : info.sample_shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
  torch::Tensor outputs;
  const bool was_training = model.is_training();
  model.eval();
  try {
    torch::InferenceMode inference;
    outputs = model.forward(one.inputs.to(device));
    model.train(was_training);
  } catch (const c10::Error& e) {
    model.train(was_training);
    throw DataError(str(key, " = ", info.path, ": samples of shape ", shape, " do not fit ", whose,
                        " (", e.what_without_backtrace(), "); ",
                        training ? "check the model section (e.g. model.in_features, "
                                   "model.input_shape)"
                                 : "evaluate it on data shaped like its training data"));
  }
  if (task == Task::kClassification && info.num_classes > outputs.size(-1)) {
    throw DataError(str(key, " = ", info.path, " has ", info.num_classes, " classes but ", whose,
                        " outputs ", outputs.size(-1),
                        training ? str(": set model.num_classes = ", info.num_classes) : ""));
  }
}

}  // namespace hpctrain::eval
