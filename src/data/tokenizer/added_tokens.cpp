#include "added_tokens.hpp"

#include <algorithm>

namespace hpctrain::data::detail {

void AddedTokens::add(const std::string& content, std::int64_t id) {
  if (content.empty()) return;
  const auto at = std::find_if(tokens_.begin(), tokens_.end(),
                               [&](const Entry& e) { return e.content.size() < content.size(); });
  tokens_.insert(at, {content, id});
  starts_[static_cast<unsigned char>(content[0])] = true;
}

}  // namespace hpctrain::data::detail
