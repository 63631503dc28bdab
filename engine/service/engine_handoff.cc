// The engine service's prefill/decode hand-off: ExportKv (the prefill
// engine streams a kept prompt's KV), ImportKv (the decode engine fetches
// and checks it) and the admission side (export_kv / import_id).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/service/engine_service.h"
#include "proto/rpc_util.h"

namespace pdserve::service {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;  // under gRPC's 4 MiB

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void FillHeader(const KvHandoff& h, v1::KvHandoffHeader* header) {
  header->set_model(h.model);
  header->set_num_layers(static_cast<int32_t>(h.shape.num_layers));
  header->set_kv_dim(static_cast<int32_t>(h.shape.kv_dim));
  header->set_page_size(static_cast<int32_t>(h.shape.page_size));
  header->set_kv_dtype(KvDTypeName(h.shape.dtype));
  header->set_page_bytes(h.shape.page_bytes);
  header->set_linear_state_bytes(h.shape.linear_state_bytes);
  header->set_capacity(static_cast<int32_t>(h.capacity));
  header->mutable_tokens()->Add(h.tokens.begin(), h.tokens.end());
  header->set_mask(std::string(h.mask.begin(), h.mask.end()));
  header->set_kv_bytes(static_cast<int64_t>(h.kv.size()));
}

absl::StatusOr<KvHandoff> FromHeader(const v1::KvHandoffHeader& header) {
  KvHandoff h;
  h.model = header.model();
  h.shape.num_layers = header.num_layers();
  h.shape.kv_dim = header.kv_dim();
  h.shape.page_size = header.page_size();
  absl::StatusOr<KvDType> dtype = ParseKvDType(header.kv_dtype());
  if (!dtype.ok()) return dtype.status();
  h.shape.dtype = *dtype;
  h.shape.page_bytes = header.page_bytes();
  h.shape.linear_state_bytes = header.linear_state_bytes();
  h.capacity = header.capacity();
  h.tokens.assign(header.tokens().begin(), header.tokens().end());
  h.mask.assign(header.mask().begin(), header.mask().end());
  if (header.kv_bytes() < 0 || h.shape.linear_state_bytes < 0) {
    return absl::InvalidArgumentError("hand-off header with negative sizes");
  }
  return h;
}

}  // namespace

grpc::Status EngineServiceImpl::ExportKv(
    grpc::ServerContext*, const v1::ExportKvRequest* req,
    grpc::ServerWriter<v1::KvChunk>* writer) {
  std::optional<KvHandoff> h = exports_.Take(req->handoff_id(), NowNs());
  if (!h.has_value()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no KV hand-off ", req->handoff_id(),
                                     " here (fetched already, or expired "
                                     "after 60 s)"));
  }
  // The header, then the KV pages and the state in chunks, copied once
  // (into each message), or, for an importer on this host, into one
  // shared-memory object named in the header.
  const absl::string_view parts[] = {h->kv, h->linear_state};
  v1::KvChunk chunk;
  FillHeader(*h, chunk.mutable_header());
  if (!shm_host_id_.empty() && req->shm_host_id() == shm_host_id_) {
    std::string name = shm_leases_.NextName();
    if (WriteSharedMemory(name, parts).ok()) {
      shm_leases_.Add(name, NowNs());
      chunk.mutable_header()->set_shm_name(std::move(name));
      if (!writer->Write(chunk)) {
        return grpc::Status(grpc::StatusCode::CANCELLED,
                            "the importing engine went away");
      }
      return grpc::Status::OK;
    }
    // No room in /dev/shm (or no /dev/shm): the stream carries it.
  }
  bool pending = true;  // `chunk` holds the header, not yet written
  for (absl::string_view part : parts) {
    for (size_t offset = 0; offset < part.size(); offset += kChunkBytes) {
      const absl::string_view piece = part.substr(offset, kChunkBytes);
      chunk.set_data(piece.data(), piece.size());
      if (!writer->Write(chunk)) {
        return grpc::Status(grpc::StatusCode::CANCELLED,
                            "the importing engine went away");
      }
      chunk.clear_header();
      pending = false;
    }
  }
  if (pending && !writer->Write(chunk)) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the importing engine went away");
  }
  return grpc::Status::OK;
}

void EngineServiceImpl::set_shared_memory_handoff(bool on) {
  shm_host_id_ = on ? SharedMemoryHostId() : "";
}

std::shared_ptr<grpc::Channel> EngineServiceImpl::PeerChannel(
    const std::string& target) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  std::shared_ptr<grpc::Channel>& channel = peers_[target];
  if (channel == nullptr) channel = rpc::MakeChannel(target);
  return channel;
}

grpc::Status EngineServiceImpl::ImportKv(grpc::ServerContext* server_ctx,
                                         const v1::ImportKvRequest* req,
                                         v1::ImportKvResponse* resp) {
  const int64_t t0 = NowNs();
  auto stub = v1::Engine::NewStub(PeerChannel(req->source()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::min(server_ctx->deadline(),
                            std::chrono::system_clock::now() +
                                std::chrono::seconds(30)));
  v1::ExportKvRequest ereq;
  ereq.set_handoff_id(req->handoff_id());
  ereq.set_shm_host_id(shm_host_id_);
  auto reader = stub->ExportKv(&ctx, ereq);
  v1::KvChunk chunk;
  std::optional<KvHandoff> h;
  size_t kv_bytes = 0, received = 0;
  std::string shm_name;  // the header's, when set
  absl::Status parse = absl::OkStatus();
  while (reader->Read(&chunk)) {
    if (!h.has_value()) {
      absl::StatusOr<KvHandoff> parsed = FromHeader(chunk.header());
      if (!parsed.ok()) {
        parse = parsed.status();
        ctx.TryCancel();
        break;
      }
      h = std::move(*parsed);
      kv_bytes = static_cast<size_t>(chunk.header().kv_bytes());
      shm_name = chunk.header().shm_name();
      h->kv.reserve(std::min<size_t>(kv_bytes, size_t{1} << 30));
    }
    // The first kv_bytes are KV pages, the rest linear-attention state.
    absl::string_view data = chunk.data();
    const size_t to_kv = std::min(data.size(), kv_bytes - h->kv.size());
    h->kv.append(data.data(), to_kv);
    h->linear_state.append(data.data() + to_kv, data.size() - to_kv);
    received += data.size();
  }
  grpc::Status status = reader->Finish();
  if (!parse.ok()) return rpc::ToGrpc(parse);
  if (!status.ok()) {
    return grpc::Status(status.error_code(),
                        absl::StrCat("fetching KV hand-off ", req->handoff_id(),
                                     " from ", req->source(), ": ",
                                     status.error_message()));
  }
  if (!h.has_value()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "the prefill engine sent an empty hand-off");
  }
  // Through shared memory: the header alone came over the stream.
  const bool through_shm = !shm_name.empty();
  if (through_shm) {
    if (received != 0) {
      return grpc::Status(grpc::StatusCode::DATA_LOSS,
                          "a hand-off both in shared memory and in chunks");
    }
    absl::StatusOr<std::string> data = TakeSharedMemory(
        shm_name, static_cast<int64_t>(kv_bytes) + h->shape.linear_state_bytes);
    if (!data.ok()) {
      return grpc::Status(
          grpc::StatusCode::DATA_LOSS,
          absl::StrCat("fetching KV hand-off ", req->handoff_id(), " from ",
                       req->source(), ": ", data.status().message()));
    }
    h->kv.assign(data->data(), kv_bytes);
    h->linear_state.assign(data->data() + kv_bytes, data->size() - kv_bytes);
    received = data->size();
  }
  if (h->kv.size() < kv_bytes) {
    return grpc::Status(grpc::StatusCode::DATA_LOSS,
                        absl::StrCat("hand-off of ", received,
                                     " bytes; its header promised ", kv_bytes,
                                     " of KV"));
  }
  // The capacity contract and the layout, before anything is staged.
  absl::StatusOr<SequenceState> contract =
      ValidateHandoff(*h, model_name_, handoff_shape_, capacity_);
  if (!contract.ok()) return rpc::ToGrpc(contract.status());
  resp->set_tokens(static_cast<int32_t>(h->tokens.size()));
  resp->set_bytes(static_cast<int64_t>(received));
  const uint64_t id = imports_.Put(std::move(*h), NowNs());
  if (id == 0) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("a hand-off of ", received,
                                     " bytes exceeds the staging bound"));
  }
  resp->set_import_id(id);
  resp->set_transfer_ms(static_cast<double>(NowNs() - t0) / 1e6);
  resp->set_shared_memory(through_shm);
  return grpc::Status::OK;
}

absl::Status EngineServiceImpl::ApplyHandoffLocked(
    const v1::AddSequenceRequest& req) {
  absl::Status s = absl::OkStatus();
  if (req.import_id() != 0) {
    std::optional<KvHandoff> h = imports_.Take(req.import_id(), NowNs());
    s = h.has_value()
            ? core_->ImportKv(req.seq_id(), *h, model_name_)
            : absl::FailedPreconditionError(absl::StrCat(
                  "KV hand-off ", req.import_id(),
                  " is not staged here (expired after 60 s, or the engine "
                  "restarted)"));
  }
  if (s.ok() && req.export_kv()) {
    // A device backend cannot export: the decode cell recomputes instead
    // (SequenceOutput.handoff_id stays 0).
    (void)core_->MarkForExport(req.seq_id());
  }
  if (!s.ok()) (void)core_->Release(req.seq_id());
  return s;
}

void EngineServiceImpl::StoreExportsLocked(v1::StepResponse* resp) {
  for (auto& [seq_id, handoff] : core_->TakeExports()) {
    handoff.model = model_name_;
    const uint64_t id = exports_.Put(std::move(handoff), NowNs());
    for (v1::SequenceOutput& out : *resp->mutable_outputs()) {
      if (out.seq_id() == seq_id) out.set_handoff_id(id);
    }
  }
}

}  // namespace pdserve::service
