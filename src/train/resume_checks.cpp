#include "hpctrain/train/resume_checks.hpp"

#include <cmath>

#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {
namespace {

std::string shown(const nlohmann::json& value) {
  return clip(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), 80);
}

class Problems {
 public:
  void add(const std::string& field, const nlohmann::json& value, const std::string& must) {
    list_.push_back(str(field, " is ", shown(value), " but ", must));
  }
  std::vector<std::string> take() { return std::move(list_); }

 private:
  std::vector<std::string> list_;
};

// An integer field of the trainer state, or nullopt (absent or of another type: the type checks
// of TrainerState::from_json name those).
std::optional<std::int64_t> integer(const nlohmann::json& ts, const char* key) {
  if (!ts.contains(key) || !ts.at(key).is_number_integer()) return std::nullopt;
  return ts.at(key).get<std::int64_t>();
}

// Samples per epoch: the sum over the checkpoint's data files when it records them all, else
// what the run's data holds (facts.samples_per_epoch).
std::optional<std::int64_t> samples_per_epoch(const nlohmann::json& ts, const ResumeFacts& facts) {
  std::optional<std::int64_t> per_epoch = facts.samples_per_epoch;
  if (ts.contains("data_files") && ts.at("data_files").is_array()) {
    std::int64_t sum = 0;
    bool ok = !ts.at("data_files").empty();
    for (const auto& f : ts.at("data_files")) {
      const auto n = f.is_object() ? integer(f, "samples") : std::nullopt;
      ok = ok && n && *n >= 1;
      if (ok) sum += *n;
    }
    if (ok) per_epoch = sum;
  }
  return per_epoch;
}

// A mixture's samples per source must add up to the samples consumed.
void check_source_consumed(const nlohmann::json& ts, std::int64_t consumed, Problems& problems) {
  if (!ts.contains("source_consumed") || !ts.at("source_consumed").is_array()) return;
  std::int64_t sum = 0;
  bool ok = true;
  for (const auto& c : ts.at("source_consumed")) {
    ok = ok && c.is_number_integer() && c.get<std::int64_t>() >= 0;
    if (ok) sum += c.get<std::int64_t>();
  }
  if (!ok || sum != consumed) {
    problems.add("trainer_state.source_consumed", ts.at("source_consumed"),
                 str("its counts must be non-negative and add up to consumed_samples, ", consumed));
  }
}

}  // namespace

std::vector<std::string> resume_state_problems(const nlohmann::json& manifest,
                                               const ResumeFacts& facts) {
  Problems problems;
  const nlohmann::json& ts =
      manifest.contains("trainer_state") ? manifest.at("trainer_state") : nlohmann::json::object();
  if (!ts.is_object()) {
    problems.add("trainer_state", ts, "it must be an object (written by hpctrain train)");
    return problems.take();
  }
  // The manifest's own copies of the position are what `inspect` and retention read; the trainer
  // state's are what a resume continues from: they are written together and must agree.
  for (const char* key : {"step", "epoch", "consumed_samples"}) {
    const auto value = integer(ts, key);
    if (value && manifest.contains(key) && *value != manifest.at(key).get<std::int64_t>()) {
      problems.add(str("trainer_state.", key), ts.at(key),
                   str("the manifest's ", key, " is ", manifest.at(key).get<std::int64_t>(),
                       ": both are written from one position"));
    }
  }
  const auto step = integer(ts, "step");
  const auto epoch = integer(ts, "epoch");
  const auto offset = integer(ts, "offset_in_epoch");
  const auto consumed = integer(ts, "consumed_samples");
  if (const auto global_step = integer(ts, "global_step");
      step && global_step && *global_step != *step) {
    problems.add("trainer_state.global_step", ts.at("global_step"),
                 str("every step takes one global batch: it must equal the step, ", *step));
  }
  for (const char* key : {"skipped_steps", "optimizer_steps"}) {
    const auto value = integer(ts, key);
    if (value && step && (*value < 0 || *value > *step)) {
      problems.add(str("trainer_state.", key), ts.at(key),
                   str("it must be in 0..step (", *step, ")"));
    }
  }
  if (ts.contains("global_batch") && (!ts.at("global_batch").is_number_integer() ||
                                      ts.at("global_batch").get<std::int64_t>() < 1)) {
    problems.add("trainer_state.global_batch", ts.at("global_batch"),
                 "it must be a positive integer");
  }
  if (ts.contains("total_steps") &&
      (!ts.at("total_steps").is_number_integer() || ts.at("total_steps").get<std::int64_t>() < 1)) {
    problems.add("trainer_state.total_steps", ts.at("total_steps"),
                 "it must be a positive integer");
  }
  if (ts.contains("lr") && (!ts.at("lr").is_number() || !std::isfinite(ts.at("lr").get<double>()) ||
                            ts.at("lr").get<double>() < 0)) {
    problems.add("trainer_state.lr", ts.at("lr"), "it must be a finite non-negative number");
  }
  // The sample position. Every step takes 1..N samples and every finished epoch 1..N of them
  // (N: samples per epoch; a global batch is at most N), so with E finished epochs and o samples
  // into this one: E + o <= consumed <= E N + o and step <= consumed <= step N.
  const std::optional<std::int64_t> per_epoch = samples_per_epoch(ts, facts);
  if (step && consumed && *consumed < *step) {
    problems.add(
        "trainer_state.consumed_samples", ts.at("consumed_samples"),
        str("every step takes at least one sample: it must be at least the step, ", *step));
  }
  if (epoch && offset && consumed && *epoch + *offset > *consumed) {
    problems.add("trainer_state.epoch", ts.at("epoch"),
                 str("with ", *offset, " samples into this epoch and ", *consumed,
                     " consumed in all, at most ", *consumed - *offset, " epochs can have ended"));
  }
  if (per_epoch) {
    const auto n = static_cast<long double>(*per_epoch);
    if (offset && (*offset < 0 || *offset > *per_epoch)) {
      problems.add("trainer_state.offset_in_epoch", ts.at("offset_in_epoch"),
                   str("an epoch has ", *per_epoch, " samples"));
    }
    if (epoch && offset && consumed &&
        static_cast<long double>(*consumed) > static_cast<long double>(*epoch) * n + *offset) {
      problems.add("trainer_state.consumed_samples", ts.at("consumed_samples"),
                   str("epoch ", *epoch, " of ", *per_epoch, " samples, ", *offset,
                       " into it, allows at most ", *epoch, " x ", *per_epoch, " + ", *offset));
    } else if (step && consumed && static_cast<long double>(*consumed) > *step * n) {
      problems.add("trainer_state.consumed_samples", ts.at("consumed_samples"),
                   str(*step, " steps of at most ", *per_epoch, " samples allow at most ",
                       static_cast<long double>(*step) * n));
    }
    if (const auto batch = integer(ts, "global_batch"); batch && *batch > *per_epoch) {
      problems.add("trainer_state.global_batch", ts.at("global_batch"),
                   str("the training set has ", *per_epoch, " samples"));
    }
  }
  if (consumed) check_source_consumed(ts, *consumed, problems);
  // `train` saves the CPU generator's state with every checkpoint; a resume on the same world
  // restores it (dropout continues exactly), so a missing one is a damaged checkpoint, not
  // something to reseed over silently. A compressed checkpoint has none.
  const auto saved_world = manifest.value("world_size", std::int64_t{0});
  const std::int64_t world = facts.world_size.value_or(saved_world);
  const bool has_rng = manifest.contains("rng") && manifest.at("rng").is_object();
  if (!has_rng && world == saved_world && ts.contains("global_batch") &&
      !ts.contains("compression")) {
    problems.add("rng", manifest.contains("rng") ? manifest.at("rng") : nlohmann::json(),
                 str("`train` records the RNG state of each of the ", saved_world,
                     " ranks that saved, and this world is the same"));
  }
  return problems.take();
}

}  // namespace hpctrain::train
