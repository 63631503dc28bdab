#include "engine/kv/page_allocator.h"

#include "absl/strings/str_cat.h"

namespace pdserve {

PageAllocator::PageAllocator(int64_t num_pages)
    : refs_(static_cast<size_t>(num_pages), 0),
      prev_(static_cast<size_t>(num_pages + 1)),
      next_(static_cast<size_t>(num_pages + 1)),
      in_lru_(static_cast<size_t>(num_pages), 0) {
  free_pos_.assign(static_cast<size_t>(num_pages), -1);
  free_.reserve(static_cast<size_t>(num_pages));
  // Lowest page on top of the stack, so allocation starts at page 0.
  for (int64_t p = num_pages - 1; p >= 0; --p) {
    PushFree(static_cast<int32_t>(p));
  }
  const auto sentinel = static_cast<int32_t>(num_pages);
  prev_[sentinel] = next_[sentinel] = sentinel;
}

void PageAllocator::LinkLast(int32_t page) {
  const auto sentinel = static_cast<int32_t>(num_pages());
  prev_[page] = prev_[sentinel];
  next_[page] = sentinel;
  next_[prev_[sentinel]] = page;
  prev_[sentinel] = page;
  in_lru_[page] = 1;
  ++num_cached_;
}

void PageAllocator::Unlink(int32_t page) {
  next_[prev_[page]] = next_[page];
  prev_[next_[page]] = prev_[page];
  in_lru_[page] = 0;
  --num_cached_;
}

absl::StatusOr<int32_t> PageAllocator::Allocate(int32_t* reclaimed) {
  if (reclaimed != nullptr) *reclaimed = -1;
  int32_t page;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
    free_pos_[page] = -1;
  } else if (num_cached_ > 0) {
    page = next_[num_pages()];  // the oldest cached page
    Unlink(page);
    if (reclaimed != nullptr) *reclaimed = page;
  } else {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no free KV page: all ", num_pages(), " pages are in use"));
  }
  refs_[page] = 1;
  return page;
}

absl::Status PageAllocator::Retain(int32_t page) {
  if (page < 0 || page >= num_pages() || (refs_[page] == 0 && !in_lru_[page])) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV page ", page, " is neither in use nor cached"));
  }
  if (in_lru_[page]) Unlink(page);
  ++refs_[page];
  return absl::OkStatus();
}

absl::Status PageAllocator::Free(int32_t page, bool keep_cached) {
  if (page < 0 || page >= num_pages()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV page ", page, " is out of range [0, ", num_pages(), ")"));
  }
  if (refs_[page] == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV page ", page, " is not in use (double free)"));
  }
  if (--refs_[page] > 0) return absl::OkStatus();
  if (keep_cached) {
    LinkLast(page);
  } else {
    PushFree(page);
  }
  return absl::OkStatus();
}

void PageAllocator::PushFree(int32_t page) {
  free_pos_[page] = static_cast<int32_t>(free_.size());
  free_.push_back(page);
}

absl::Status PageAllocator::Take(int32_t page, bool* was_cached) {
  if (was_cached != nullptr) *was_cached = false;
  if (page < 0 || page >= num_pages()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV page ", page, " is out of range [0, ", num_pages(), ")"));
  }
  if (refs_[page] > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV page ", page, " is in use"));
  }
  if (in_lru_[page]) {
    Unlink(page);
    if (was_cached != nullptr) *was_cached = true;
  } else {
    // Swap-remove from the free stack.
    const int32_t pos = free_pos_[page];
    const int32_t last = free_.back();
    free_[pos] = last;
    free_pos_[last] = pos;
    free_.pop_back();
    free_pos_[page] = -1;
  }
  refs_[page] = 1;
  return absl::OkStatus();
}

}  // namespace pdserve
