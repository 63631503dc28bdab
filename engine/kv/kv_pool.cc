#include "engine/kv/kv_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pdserve {

KvModelShape KvModelShape::FromConfig(const ModelConfig& config) {
  KvModelShape shape;
  shape.num_attention_layers = config.num_kv_layers();
  shape.kv_dim = config.kv_dim();
  shape.head_dim = config.head_dim;
  shape.max_context = config.max_context;
  // Hybrid models: KV for the full-attention layers only, and one state
  // slot per sequence laid out per linear layer as GatedDeltaNet reads it.
  shape.num_linear_layers = config.num_linear_layers();
  if (shape.num_linear_layers > 0) {
    shape.conv_state_floats = config.conv_state_floats();
    shape.recurrent_state_floats = config.recurrent_state_floats();
  }
  return shape;
}

absl::StatusOr<int64_t> ParseMemAvailable(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumeSuffix(&line, "kB")) {
      return absl::InvalidArgumentError(
          absl::StrCat("MemAvailable line has no kB unit: '", line, "'"));
    }
    int64_t kb = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kb) || kb < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("MemAvailable value is not a count: '", line, "'"));
    }
    return kb * 1024;
  }
  return absl::InvalidArgumentError("no MemAvailable line in meminfo");
}

absl::StatusOr<int64_t> ReadMemAvailableBytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) return absl::UnavailableError("cannot open /proc/meminfo");
  std::stringstream text;
  text << in.rdbuf();
  return ParseMemAvailable(text.str());
}

namespace {

absl::Status CheckShape(const KvModelShape& s, int64_t page_size,
                        int64_t max_sequences) {
  if (s.num_attention_layers < 0 || s.num_linear_layers < 0 ||
      s.num_attention_layers + s.num_linear_layers <= 0 || s.kv_dim < 0 ||
      (s.num_attention_layers > 0 && s.kv_dim <= 0) ||
      s.conv_state_floats < 0 || s.recurrent_state_floats < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad KV model shape: attention layers=", s.num_attention_layers,
        " kv_dim=", s.kv_dim, " linear layers=", s.num_linear_layers,
        " conv state=", s.conv_state_floats,
        " recurrent state=", s.recurrent_state_floats));
  }
  if (page_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV page size must be positive, got ", page_size));
  }
  if (max_sequences <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_sequences must be positive, got ", max_sequences));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ResolveBudget(
    const KvMemoryBudget& budget,
    const std::function<absl::StatusOr<int64_t>()>& available_bytes) {
  const bool has_bytes = budget.bytes != 0;
  const bool has_fraction = budget.fraction != 0.0;
  if (has_bytes == has_fraction) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV memory budget needs exactly one of bytes or fraction; got bytes=",
        budget.bytes, " fraction=", budget.fraction));
  }
  if (has_bytes) {
    if (budget.bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KV memory budget must be positive, got ", budget.bytes, " bytes"));
    }
    return budget.bytes;
  }
  if (!(budget.fraction > 0.0 && budget.fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV memory fraction must be in (0, 1], got ", budget.fraction));
  }
  if (!available_bytes) {
    return absl::InvalidArgumentError(
        "fractional KV budget without a source of available memory");
  }
  absl::StatusOr<int64_t> avail = available_bytes();
  if (!avail.ok()) return avail.status();
  return static_cast<int64_t>(static_cast<double>(*avail) * budget.fraction);
}

}  // namespace

absl::StatusOr<KvGeometry> ComputeKvGeometry(
    const KvModelShape& shape, const KvMemoryBudget& budget, int64_t page_size,
    int64_t max_sequences,
    const std::function<absl::StatusOr<int64_t>()>& available_bytes,
    KvDType dtype) {
  if (absl::Status s = CheckShape(shape, page_size, max_sequences); !s.ok()) {
    return s;
  }
  const int64_t head_dim = shape.head_dim > 0 ? shape.head_dim : shape.kv_dim;
  if (shape.num_attention_layers > 0) {
    if (absl::Status s = CheckKvDType(dtype, shape.kv_dim, head_dim); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckKvPageSize(dtype, page_size); !s.ok()) return s;
  }
  absl::StatusOr<int64_t> resolved = ResolveBudget(budget, available_bytes);
  if (!resolved.ok()) return resolved.status();

  KvGeometry g;
  g.num_layers = shape.num_attention_layers;
  g.kv_dim = shape.kv_dim;
  g.head_dim = head_dim;
  g.dtype = dtype;
  g.page_size = page_size;
  g.max_context = shape.max_context;
  g.max_sequences = max_sequences;
  g.budget_bytes = *resolved;
  g.bytes_per_token_per_layer = 2 * KvRowBytes(dtype, shape.kv_dim);
  g.bytes_per_token = g.bytes_per_token_per_layer * shape.num_attention_layers;
  g.bytes_per_page = RoundUpToOsPage(g.bytes_per_token * page_size);
  g.linear_state_bytes_per_sequence =
      shape.num_linear_layers *
      (shape.conv_state_floats + shape.recurrent_state_floats) * 4;
  const int64_t state_bytes =
      RoundUpToOsPage(g.linear_state_bytes_per_sequence) * max_sequences;
  const int64_t kv_bytes = g.budget_bytes - state_bytes;
  if (g.bytes_per_page > 0) {
    if (kv_bytes < g.bytes_per_page) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "KV memory budget of ", g.budget_bytes, " bytes (", state_bytes,
          " of them for linear-attention state of ", max_sequences,
          " sequences) holds no KV page of ", g.bytes_per_page, " bytes (",
          page_size, " tokens x ", g.bytes_per_token, " bytes)"));
    }
    g.num_pages = kv_bytes / g.bytes_per_page;
    g.total_tokens = g.num_pages * page_size;
  } else if (kv_bytes < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV memory budget of ", g.budget_bytes,
                     " bytes cannot hold the linear-attention state of ",
                     max_sequences, " sequences (", state_bytes, " bytes)"));
  }
  return g;
}

// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::Create(
    const KvGeometry& geometry, KvPoolMemory memory, bool prefix_cache) {
  if (prefix_cache && geometry.linear_state_bytes_per_sequence > 0) {
    return absl::InvalidArgumentError(
        "the prefix cache needs a model without linear-attention state");
  }
  absl::StatusOr<std::unique_ptr<KvPool>> pool = CreateMapped(geometry, memory);
  if (pool.ok() && prefix_cache) {
    (*pool)->prefix_ =
        std::make_unique<PrefixCache>(geometry.num_pages, geometry.page_size);
  }
  return pool;
}

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::CreateMapped(
    const KvGeometry& geometry, KvPoolMemory memory) {
  if (memory == KvPoolMemory::kAccountingOnly) {
    return std::unique_ptr<KvPool>(new KvPool(geometry, nullptr, nullptr));
  }
  std::unique_ptr<KvStorage> storage;
  if (geometry.num_pages > 0) {
    absl::StatusOr<std::unique_ptr<KvStorage>> s =
        KvStorage::Create(geometry.num_layers, geometry.kv_dim,
                          geometry.page_size, geometry.num_pages,
                          geometry.dtype, geometry.head_dim,
                          geometry.huge_pages);
    if (!s.ok()) return s.status();
    storage = std::move(*s);
    if (storage->page_stride_bytes() != geometry.bytes_per_page) {
      return absl::InvalidArgumentError(absl::StrCat(
          "geometry page bytes ", geometry.bytes_per_page,
          " != storage page stride ", storage->page_stride_bytes()));
    }
  }
  float* state = nullptr;
  if (geometry.linear_state_bytes_per_sequence > 0) {
    const size_t bytes =
        RoundUpToOsPage(geometry.linear_state_bytes_per_sequence) *
        geometry.max_sequences;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot map ", bytes, " bytes of linear-attention state"));
    }
    state = static_cast<float*>(p);
  }
  return std::unique_ptr<KvPool>(
      new KvPool(geometry, std::move(storage), state));
}

KvPool::KvPool(const KvGeometry& geometry, std::unique_ptr<KvStorage> storage,
               float* linear_state)
    : geometry_(geometry),
      storage_(std::move(storage)),
      linear_state_(linear_state),
      pages_(geometry.num_pages) {
  page_known_.assign(static_cast<size_t>(geometry.num_pages), 0);
  page_parent_.assign(static_cast<size_t>(geometry.num_pages), -1);
  page_tokens_.assign(
      static_cast<size_t>(geometry.num_pages * geometry.page_size), 0);
  if (linear_state_ != nullptr) {
    linear_state_bytes_ =
        RoundUpToOsPage(geometry.linear_state_bytes_per_sequence) *
        geometry.max_sequences;
  }
  if (has_linear_state()) {
    for (int64_t s = geometry.max_sequences - 1; s >= 0; --s) {
      free_slots_.push_back(static_cast<int32_t>(s));
    }
  }
  seqs_.reserve(static_cast<size_t>(geometry.max_sequences));
}

KvPool::~KvPool() {
  if (linear_state_ != nullptr) munmap(linear_state_, linear_state_bytes_);
}

absl::Status KvPool::Add(SequenceId id, int64_t max_tokens) {
  if (max_tokens < 1 || max_tokens > geometry_.total_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, " asks for ", max_tokens,
        " tokens; the KV pool holds [1, ", geometry_.total_tokens, "]"));
  }
  if (seqs_.contains(id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("sequence ", id, " is already in the KV pool"));
  }
  if (static_cast<int64_t>(seqs_.size()) >= geometry_.max_sequences) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pool holds its maximum of ", geometry_.max_sequences,
                     " sequences"));
  }
  Sequence seq;
  seq.max_pages = (max_tokens + geometry_.page_size - 1) / geometry_.page_size;
  seq.pages.reserve(static_cast<size_t>(seq.max_pages));
  if (has_linear_state()) {
    seq.slot = free_slots_.back();
    free_slots_.pop_back();
    if (linear_state_ != nullptr) {
      std::memset(LinearStateOfSlot(seq.slot), 0,
                  geometry_.linear_state_bytes_per_sequence);
    }
  }
  seqs_.emplace(id, std::move(seq));
  return absl::OkStatus();
}

float* KvPool::LinearStateOfSlot(int32_t slot) {
  const int64_t stride =
      RoundUpToOsPage(geometry_.linear_state_bytes_per_sequence) / 4;
  return linear_state_ + slot * stride;
}

int64_t KvPool::PagesNeeded(SequenceId id, int64_t num_tokens) const {
  const int64_t want =
      (num_tokens + geometry_.page_size - 1) / geometry_.page_size;
  auto it = seqs_.find(id);
  const int64_t have =
      it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.pages.size());
  return std::max<int64_t>(0, want - have);
}

absl::Status KvPool::Reserve(SequenceId id, int64_t num_tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sequence ", id, " is not in the KV pool"));
  }
  const int64_t need = PagesNeeded(id, num_tokens);
  if (need > 0 && it->second.ledger) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", id, " needs ", need, " more KV pages for ", num_tokens,
        " tokens that the plan did not give"));
  }
  if (need > pages_.num_free()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sequence ", id, " needs ", need, " more KV pages for ",
                     num_tokens, " tokens; ", pages_.num_free(), " of ",
                     pages_.num_pages(), " pages are free"));
  }
  std::vector<int32_t>& table = it->second.pages;
  for (int64_t i = 0; i < need; ++i) {
    int32_t reclaimed = -1;
    const int32_t page = *pages_.Allocate(&reclaimed);
    if (reclaimed >= 0 && prefix_ != nullptr) prefix_->Erase(reclaimed);
    page_known_[page] = 0;
    table.push_back(page);
  }
  return absl::OkStatus();
}

absl::Status KvPool::MarkWritten(SequenceId id, int64_t num_tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sequence ", id, " is not in the KV pool"));
  }
  Sequence& seq = it->second;
  const int64_t covered =
      static_cast<int64_t>(seq.pages.size()) * geometry_.page_size;
  if (num_tokens < seq.written || num_tokens > covered) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, ": cannot mark ", num_tokens,
                     " tokens written (already ", seq.written, ", pages cover ",
                     covered, ")"));
  }
  used_tokens_ += num_tokens - seq.written;
  seq.written = num_tokens;
  return absl::OkStatus();
}

absl::Status KvPool::Remove(SequenceId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sequence ", id, " is not in the KV pool"));
  }
  Sequence& seq = it->second;
  absl::Status status;
  for (int32_t page : seq.pages) {
    // A ledger sequence's page keeps its data while its content is known:
    // the ledger may claim it as a prefix until it hands the page out again.
    const bool keep =
        prefix_ != nullptr &&
        (prefix_->Contains(page) || (seq.ledger && page_known_[page] != 0));
    status.Update(pages_.Free(page, keep));
    // Shared pages (still in use) and cached ones keep their data.
    if (!pages_.in_use(page) && !pages_.cached(page) && storage_ != nullptr) {
      storage_->ReleasePage(page);
    }
  }
  if (seq.slot >= 0) {
    if (linear_state_ != nullptr) {
      madvise(LinearStateOfSlot(seq.slot),
              RoundUpToOsPage(geometry_.linear_state_bytes_per_sequence),
              MADV_DONTNEED);
    }
    free_slots_.push_back(seq.slot);
  }
  used_tokens_ -= seq.written;
  seqs_.erase(it);
  return status;
}

absl::Span<const int32_t> KvPool::PageTable(SequenceId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return {};
  return it->second.pages;
}

int32_t KvPool::StateSlot(SequenceId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? -1 : it->second.slot;
}

float* KvPool::LinearState(SequenceId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.slot < 0 || linear_state_ == nullptr) {
    return nullptr;
  }
  return LinearStateOfSlot(it->second.slot);
}

KvPoolStats KvPool::Stats() const {
  KvPoolStats s;
  s.total_pages = pages_.num_pages();
  s.used_pages = pages_.num_used();
  s.free_pages = pages_.num_free();
  s.total_tokens = geometry_.total_tokens;
  s.used_tokens = used_tokens_;
  s.free_tokens = s.free_pages * geometry_.page_size;
  s.sequences = static_cast<int64_t>(seqs_.size());
  s.linear_slots_used = has_linear_state() ? s.sequences : 0;
  s.cached_pages = pages_.num_cached();
  s.used_bytes = s.used_pages * geometry_.bytes_per_page +
                 s.linear_slots_used *
                     RoundUpToOsPage(geometry_.linear_state_bytes_per_sequence);
  return s;
}

absl::StatusOr<int64_t> KvPool::AttachPrefix(SequenceId id,
                                             absl::Span<const int32_t> tokens,
                                             int64_t max_pages) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sequence ", id, " is not in the KV pool"));
  }
  Sequence& seq = it->second;
  if (prefix_ == nullptr) return 0;
  if (!seq.pages.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", id, " already has pages; a prefix attaches first"));
  }
  for (int32_t page : prefix_->Match(tokens, max_pages)) {
    if (absl::Status s = pages_.Retain(page); !s.ok()) return s;
    seq.pages.push_back(page);
  }
  seq.indexed_pages = static_cast<int64_t>(seq.pages.size());
  const int64_t covered =
      static_cast<int64_t>(seq.pages.size()) * geometry_.page_size;
  if (absl::Status s = MarkWritten(id, covered); !s.ok()) return s;
  return covered;
}

absl::Status KvPool::AssignPages(SequenceId id,
                                 absl::Span<const int32_t> pages) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sequence ", id, " is not in the KV pool"));
  }
  Sequence& seq = it->second;
  const int64_t capacity = seq.max_pages;
  if (static_cast<int64_t>(seq.pages.size() + pages.size()) > capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, ": ", pages.size(), " more KV pages exceed its ",
        capacity, " pages"));
  }
  for (size_t i = 0; i < pages.size(); ++i) {
    const int32_t p = pages[i];
    if (!pages_.is_free(p)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sequence ", id, ": KV page ", p,
          " of the plan is out of range or in use"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (pages[j] == p) {
        return absl::FailedPreconditionError(absl::StrCat(
            "sequence ", id, ": KV page ", p, " is listed twice"));
      }
    }
  }
  for (int32_t p : pages) {
    bool was_cached = false;
    (void)pages_.Take(p, &was_cached);
    if (was_cached && prefix_ != nullptr) prefix_->Erase(p);
    page_known_[p] = 0;  // about to hold new data
    seq.pages.push_back(p);
  }
  seq.ledger = true;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> KvPool::AssignPrefix(SequenceId id,
                                             absl::Span<const int32_t> tokens,
                                             absl::Span<const int32_t> pages,
                                             int64_t index_tokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sequence ", id, " is not in the KV pool"));
  }
  Sequence& seq = it->second;
  if (!seq.pages.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", id, " already has pages; a prefix attaches first"));
  }
  seq.ledger = true;
  seq.index_tokens = index_tokens;
  if (pages.empty()) return 0;
  if (prefix_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", id, ": a plan gives a cached prefix of ", pages.size(),
        " KV pages, but this pool keeps no prefixes"));
  }
  const int64_t ps = geometry_.page_size;
  if (static_cast<int64_t>(tokens.size()) <
      static_cast<int64_t>(pages.size()) * ps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, ": a prefix of ", pages.size(), " KV pages is longer "
        "than its ", tokens.size(), " tokens"));
  }
  for (size_t k = 0; k < pages.size(); ++k) {
    const int32_t p = pages[k];
    const int32_t parent = k == 0 ? -1 : pages[k - 1];
    const bool holds =
        p >= 0 && p < pages_.num_pages() && page_known_[p] &&
        page_parent_[p] == parent &&
        std::equal(tokens.begin() + k * ps, tokens.begin() + (k + 1) * ps,
                   page_tokens_.begin() + p * ps);
    if (!holds) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sequence ", id, ": KV page ", p, " (prefix page ", k,
          ") does not hold those prompt tokens"));
    }
  }
  for (int32_t page : pages) {
    if (absl::Status s = pages_.Retain(page); !s.ok()) return s;
    seq.pages.push_back(page);
  }
  seq.indexed_pages = static_cast<int64_t>(seq.pages.size());
  const int64_t covered =
      static_cast<int64_t>(seq.pages.size()) * geometry_.page_size;
  if (absl::Status s = MarkWritten(id, covered); !s.ok()) return s;
  return covered;
}

void KvPool::IndexWritten(SequenceId id, absl::Span<const int32_t> tokens) {
  auto it = seqs_.find(id);
  if (prefix_ == nullptr || it == seqs_.end()) return;
  Sequence& seq = it->second;
  if (seq.index_tokens >= 0 &&
      static_cast<int64_t>(tokens.size()) > seq.index_tokens) {
    tokens = tokens.subspan(0, static_cast<size_t>(seq.index_tokens));
  }
  const int64_t ps = geometry_.page_size;
  const int64_t known =
      std::min<int64_t>(seq.written, static_cast<int64_t>(tokens.size()));
  for (int64_t k = seq.indexed_pages;
       (k + 1) * ps <= known && k < static_cast<int64_t>(seq.pages.size());
       ++k) {
    const int32_t page = seq.pages[k];
    const int32_t parent = k == 0 ? -1 : seq.pages[k - 1];
    prefix_->Insert(parent, page, tokens.subspan(k * ps, ps));
    // What the page holds, for AssignPrefix to check a ledger's claim.
    std::copy(tokens.begin() + k * ps, tokens.begin() + (k + 1) * ps,
              page_tokens_.begin() + page * ps);
    page_parent_[page] = parent;
    page_known_[page] = 1;
    seq.indexed_pages = k + 1;
  }
}

int64_t KvPool::ResidentBytes() const {
  int64_t bytes = 0;
  if (storage_ != nullptr) {
    bytes += ResidentBytesOf(storage_->mapping(), storage_->mapped_bytes());
  }
  if (linear_state_ != nullptr) {
    bytes += ResidentBytesOf(linear_state_, linear_state_bytes_);
  }
  return bytes;
}

}  // namespace pdserve
