#include "data_state.hpp"

#include <map>
#include <set>

#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {

void record_data_state(nlohmann::json& trainer_state, const data::TrainSampler& sampler,
                       const data::SamplerState& state, const data::DatasetInfo& train) {
  trainer_state["sample_order"] = data::sample_order_name(sampler.order());
  if (!state.source_consumed.empty()) trainer_state["source_consumed"] = state.source_consumed;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : train.files) {
    files.push_back(
        {{"path", f.path}, {"name", f.name}, {"samples", f.num_samples}, {"checksum", f.checksum}});
  }
  trainer_state["data_files"] = std::move(files);
}

data::SampleOrder restore_data_state(const nlohmann::json& ts, const data::DatasetInfo& train,
                                     bool allow_changed_files, data::SamplerState& state) {
  if (ts.contains("data_files") && ts.at("data_files").is_array()) {
    // Compare names (below the pattern's directory), counts and checksums, in index order.
    std::vector<std::string> differences;
    const auto& saved = ts.at("data_files");
    std::map<std::string, nlohmann::json> by_name;
    for (const auto& f : saved) by_name[f.value("name", std::string())] = f;
    std::set<std::string> now;
    for (const auto& f : train.files) {
      now.insert(f.name);
      auto it = by_name.find(f.name);
      if (it == by_name.end()) {
        differences.push_back(str("'", f.name, "' is new"));
      } else if (it->second.value("samples", std::int64_t{-1}) != f.num_samples ||
                 it->second.value("checksum", std::string()) != f.checksum) {
        differences.push_back(str("'", f.name, "' changed (", it->second.value("samples", 0),
                                  " samples, checksum ", it->second.value("checksum", ""), "; now ",
                                  f.num_samples, ", ", f.checksum, ")"));
      }
    }
    for (const auto& [name, f] : by_name) {
      if (now.count(name) == 0) differences.push_back(str("'", name, "' is missing"));
    }
    if (differences.empty() && saved.size() == train.files.size()) {
      for (std::size_t i = 0; i < train.files.size(); ++i) {
        if (saved[i].value("name", std::string()) != train.files[i].name) {
          differences.push_back("the files are in another order");
          break;
        }
      }
    }
    if (!differences.empty()) {
      std::string list;
      for (std::size_t i = 0; i < differences.size() && i < 5; ++i) {
        list += (list.empty() ? "" : "; ") + differences[i];
      }
      if (differences.size() > 5) list += str("; and ", differences.size() - 5, " more");
      if (!allow_changed_files) {
        throw AgreedDataError(
            str("data.train differs from the files the checkpoint was trained on (", saved.size(),
                " files then, ", train.files.size(), " now): ", list,
                ": point data.train at the same files, or set data.allow_changed_files: true to "
                "continue on these (the sample order from here then differs from an uninterrupted "
                "run)"));
      }
      log::warn(str("data.allow_changed_files: data.train differs from the checkpoint's files (",
                    list,
                    "): the sample order continues from the saved position over the new "
                    "files, not as an uninterrupted run would"));
      // A position past the new epoch's end starts the next epoch.
      if (state.offset_in_epoch > train.num_samples) state.offset_in_epoch = train.num_samples;
      if (ts.contains("source_consumed") && train.sources.size() != ts["source_consumed"].size()) {
        state.source_consumed.clear();
      }
    }
  }
  if (ts.contains("source_consumed")) {
    const auto& counts = ts.at("source_consumed");
    if (!counts.is_array()) {
      throw CheckpointError("manifest.json: trainer_state.source_consumed should be a list");
    }
    state.source_consumed.clear();
    for (const auto& c : counts) {
      if (!c.is_number_integer() || c.get<std::int64_t>() < 0) {
        throw CheckpointError(
            "manifest.json: trainer_state.source_consumed should hold non-negative integers");
      }
      state.source_consumed.push_back(c.get<std::int64_t>());
    }
    if (!train.sources.empty() && state.source_consumed.size() != train.sources.size()) {
      if (!allow_changed_files) {
        throw AgreedDataError(str("the checkpoint's mixture has ", state.source_consumed.size(),
                                  " sources, data.train now ", train.sources.size(),
                                  ": resume with the same sources, or set "
                                  "data.allow_changed_files: true to restart the blend"));
      }
      state.source_consumed.clear();
    }
    if (train.sources.empty()) state.source_consumed.clear();
  }
  const std::string order = ts.value("sample_order", std::string("held"));
  return order == "keyed" ? data::SampleOrder::kKeyed : data::SampleOrder::kHeld;
}

nlohmann::ordered_json source_counts(const data::TrainSampler& sampler,
                                     const data::SamplerState& before,
                                     const data::SamplerState& after) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  const auto& sources = sampler.sources();
  for (std::size_t i = 0; i < sources.size() && i < after.source_consumed.size(); ++i) {
    const std::int64_t was = i < before.source_consumed.size() ? before.source_consumed[i] : 0;
    out[sources[i].name] = after.source_consumed[i] - was;
  }
  return out;
}

}  // namespace hpctrain::train
