#include "hpctrain/model/model_spec.hpp"

#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/llama.hpp"
#include "hpctrain/model/model_family.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

const std::vector<std::int64_t>& ModelSpec::cnn_input_shape() {
  static const std::vector<std::int64_t> shape{1, 28, 28};
  return shape;
}

ModelSpec ModelSpec::from(ConfigSection& section) {
  ModelSpec spec;
  spec.name = section.get<std::string>("name", spec.name);
  if (spec.name.empty()) {
    section.fail("name", "must name a model (mlp, cnn, gpt, llama, torchscript, ...)");
  }
  // The family's facts (model_family.hpp); none for a plugin's model, loaded or not.
  const ModelFamily* family = find_model_family(spec.name);
  // A Hugging Face folder's config.json sets (or checks) the llama's keys before any is read.
  if (family != nullptr && family->prepare_section != nullptr) family->prepare_section(section);
  const bool language_model = family != nullptr && family->decoder;
  // seq_len for every model, so the resolved config of any run records it (0 for models without
  // sequences; the gpt's own default for the gpt).
  spec.seq_len = section.get<std::int64_t>("seq_len", language_model ? GptOptions{}.seq_len : 0);
  if (spec.seq_len < 0) section.fail("seq_len", "must be >= 0 (0: not a sequence model)");
  if (family != nullptr) spec.task = family->task;
  if (spec.name == "mlp") {
    const auto in_features = section.get<std::int64_t>("in_features", kMlpInFeatures);
    if (in_features < 1) section.fail("in_features", "must be positive");
    spec.input_shape = {in_features};
  } else if (spec.name == "cnn") {
    spec.input_shape = section.get<std::vector<std::int64_t>>("input_shape", cnn_input_shape());
    if (spec.input_shape.size() != 3) {
      section.fail("input_shape", "must be [channels, height, width]");
    }
    for (auto d : spec.input_shape) {
      if (d < 1) section.fail("input_shape", "every extent must be positive");
    }
  } else if (language_model) {
    static_assert(GptOptions{}.vocab_size == LlamaOptions{}.vocab_size &&
                      GptOptions{}.seq_len == LlamaOptions{}.seq_len,
                  "the language models share the defaults of vocab_size and seq_len");
    spec.vocab_size = section.get<std::int64_t>("vocab_size", GptOptions{}.vocab_size);
  } else if (spec.name == "torchscript") {
    // An unknown task is the module's loader's error (it lists the choices); here it stays open.
    spec.task = task_from_name(section.get<std::string>("task", task_name(Task::kClassification)));
  } else if (section.has("vocab_size")) {
    spec.vocab_size = section.get<std::int64_t>("vocab_size", 0);  // a plugin's language model
  }
  if (spec.vocab_size < 0) section.fail("vocab_size", "must be >= 0");
  if (section.has("init_from")) spec.init_from = section.get<std::string>("init_from", "");
  return spec;
}

}  // namespace hpctrain::model
