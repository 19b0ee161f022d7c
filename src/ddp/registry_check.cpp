#include "registry_check.hpp"

#include <cohort/core/error.hpp>

#include <cstdint>
#include <map>

namespace cohort::detail {

namespace {

std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) {
    text += line;
    text.push_back('\n');
  }
  return text;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return lines;
}

std::string fnv1a(const std::string& text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return std::to_string(hash) + ":" + std::to_string(text.size());
}

std::string quoted(const std::vector<std::string>& lines, std::size_t i) {
  if (i >= lines.size()) {
    return "nothing more";
  }
  std::string text(1, '\'');
  text.append(lines[i]);
  text.push_back('\'');
  return text;
}

std::string rank_list(const std::vector<int>& members, const StoreGroup& group) {
  std::string text = members.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (i > 0) {
      text.append(", ");
    }
    text.append(std::to_string(group.global_rank(members[i])));
  }
  return text;
}

}  // namespace

void check_same_on_every_rank(StoreGroup& group, const std::vector<std::string>& lines) {
  const std::string text = join_lines(lines);
  const std::vector<std::string> hashes = group.all_gather("ddp/registry/hash", fnv1a(text));

  // Group the ranks by hash, rank 0's group first.
  std::map<std::string, std::vector<int>> groups;
  std::vector<std::string> order;
  for (int member = 0; member < group.size(); ++member) {
    auto [it, inserted] = groups.try_emplace(hashes[static_cast<std::size_t>(member)]);
    if (inserted) {
      order.push_back(it->first);
    }
    it->second.push_back(member);
  }
  if (groups.size() == 1) {
    return;
  }

  // Every member saw the same hashes, so every member gathers the descriptions.
  const std::vector<std::string> texts = group.all_gather("ddp/registry/lines", text);
  auto lines_of = [&](int member) { return split_lines(texts[static_cast<std::size_t>(member)]); };
  const std::vector<int>& reference_ranks = groups[order.front()];
  const std::vector<std::string> reference = lines_of(reference_ranks.front());
  std::string message =
      "DataParallel: the ranks did not register the same parameters with the same options "
      "(every rank must build the same ParamRegistry and DataParallelOptions):";
  for (std::size_t g = 1; g < order.size(); ++g) {
    const std::vector<int>& ranks = groups[order[g]];
    const std::vector<std::string> other = lines_of(ranks.front());
    std::size_t i = 0;
    while (i < reference.size() && i < other.size() && reference[i] == other[i]) {
      ++i;
    }
    const std::string mine = quoted(reference, i);
    const std::string theirs = quoted(other, i);
    for (const std::string& part :
         {std::string(" "), rank_list(reference_ranks, group),
          std::string(reference_ranks.size() == 1 ? " has " : " have "), mine,
          std::string(" where "), rank_list(ranks, group),
          std::string(ranks.size() == 1 ? " has " : " have "), theirs, std::string(";")}) {
      message.append(part);
    }
  }
  message.pop_back();
  COHORT_FAIL(InvalidArgument, message);
}

}  // namespace cohort::detail
