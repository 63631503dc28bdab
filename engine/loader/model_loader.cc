#include "engine/loader/model_loader.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/formats/gguf.h"
#include "engine/formats/llama2c.h"
#include "engine/formats/safetensors.h"
#include "engine/loader/gguf_hybrid.h"
#include "engine/loader/model_config_io.h"
#include "engine/loader/tensor_sources.h"
#include "engine/loader/vision_loader.h"
#include "engine/loader/weight_builder.h"

namespace pdserve {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string ModelNameFromPath(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
  if (base == "config.json" && slash != std::string::npos) {
    return ModelNameFromPath(p.substr(0, slash));
  }
  const size_t dot = base.rfind('.');
  return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

// The folder a safetensors model lives in.
std::string ModelDir(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return path;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// preprocessor_config.json in `dir`: null when absent; INVALID_ARGUMENT
// when it is not JSON.
absl::StatusOr<nlohmann::json> ReadPreprocessorConfig(const std::string& dir) {
  const std::string path = dir + "/preprocessor_config.json";
  std::ifstream in(path);
  if (!in) return nlohmann::json();
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": bad JSON: ", e.what()));
  }
}

// How a checkpoint's vision_config is taken.
enum class VisionMode {
  kStrict,   // its tensors are there: errors are errors
  kLenient,  // config only (ReadModelConfig): an error means no tower
  kSkip,     // no vision tensors: the language model alone
};

// The text config plus, for a vision-language checkpoint, its vision tower.
absl::StatusOr<ModelConfig> HfConfig(const nlohmann::json& j,
                                     const std::string& dir, VisionMode mode) {
  const std::string source = dir + "/config.json";
  absl::StatusOr<ModelConfig> c = ConfigFromHfJson(j, source, ModelNameFromPath(dir));
  if (!c.ok() || mode == VisionMode::kSkip) return c;
  absl::StatusOr<nlohmann::json> pre = ReadPreprocessorConfig(dir);
  absl::StatusOr<VisionConfig> v =
      pre.ok() ? VisionConfigFromHfJson(j, *pre, source)
               : absl::StatusOr<VisionConfig>(pre.status());
  if (!v.ok() && mode == VisionMode::kLenient) return c;
  if (!v.ok()) return v.status();
  if (v->present() && v->out_hidden_size != c->hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": vision_config.out_hidden_size ", v->out_hidden_size,
        " != the language model's hidden_size ", c->hidden_size));
  }
  c->vision = *v;
  return c;
}

absl::StatusOr<ModelConfig> SafetensorsConfig(const SafetensorsModel& m) {
  if (m.config().is_null()) {
    return absl::NotFoundError(absl::StrCat(
        m.dir(), ": config.json not found next to the safetensors weights"));
  }
  // transformers ties the head when asked to, and falls back to a random
  // one when lm_head is absent: we refuse the latter (see weight builder).
  // A vision_config without vision tensors (a checkpoint stripped to its
  // language model) loads the language model alone.
  const bool tower =
      m.FindTensor("model.visual.patch_embed.proj.weight") != nullptr ||
      m.FindTensor("visual.patch_embed.proj.weight") != nullptr;
  return HfConfig(m.config(), m.dir(),
                  tower ? VisionMode::kStrict : VisionMode::kSkip);
}

// The vision tower of a safetensors checkpoint (model.visual.* as
// transformers v5 saves it, visual.* as published Qwen checkpoints).
absl::Status SafetensorsVision(std::shared_ptr<const SafetensorsModel> m,
                               ModelWeights& w) {
  if (!w.config.vision.present()) return absl::OkStatus();
  const std::string prefix =
      m->FindTensor("model.visual.patch_embed.proj.weight") != nullptr
          ? "model.visual."
          : "visual.";
  TensorLookup get = [m](const std::string& name)
      -> absl::StatusOr<RawTensor> {
    absl::StatusOr<const SafetensorsTensor*> t = m->GetTensor(name);
    if (!t.ok()) return t.status();
    return RawTensorFromSafetensors(**t);
  };
  return BuildVisionWeights(get, VisionNaming::kHf, prefix, m->dir(), w);
}

absl::StatusOr<std::unique_ptr<ModelWeights>> Assemble(
    ModelConfig config, const TensorSource& source, ModelFormat format) {
  auto w = std::make_unique<ModelWeights>();
  w->config = std::move(config);
  w->source_path = source.path();
  w->source_format = ModelFormatName(format);
  if (absl::Status s = BuildModelWeights(source, *w); !s.ok()) return s;
  return w;
}

}  // namespace

const char* ModelFormatName(ModelFormat format) {
  switch (format) {
    case ModelFormat::kGguf:
      return "gguf";
    case ModelFormat::kSafetensors:
      return "safetensors";
    case ModelFormat::kLlama2c:
      return "llama2c";
  }
  return "unknown";
}

absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": no such file or directory"));
  }
  if (S_ISDIR(st.st_mode) || EndsWith(path, "config.json") ||
      EndsWith(path, ".safetensors")) {
    return ModelFormat::kSafetensors;
  }
  char head[28] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(head, sizeof(head));
  const std::streamsize got = in.gcount();
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) return ModelFormat::kGguf;
  if (EndsWith(path, ".bin")) {
    absl::StatusOr<Llama2cHeader> h = ParseLlama2cHeader(path, head, got);
    if (!h.ok()) return h.status();
    if (static_cast<int64_t>(st.st_size) != h->ExpectedFileSize()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": llama2.c file size is ", st.st_size,
          " bytes but its header implies ", h->ExpectedFileSize()));
    }
    return ModelFormat::kLlama2c;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unrecognized model format (expected a GGUF file, a ",
      "safetensors folder or config.json, or a llama2.c .bin checkpoint)"));
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModel(
    const std::string& path) {
  absl::StatusOr<ModelFormat> format = DetectModelFormat(path);
  if (!format.ok()) return format.status();
  switch (*format) {
    case ModelFormat::kGguf: {
      absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
      if (!f.ok()) return f.status();
      std::shared_ptr<const GgufFile> file = std::move(*f);
      absl::StatusOr<ModelConfig> c = ConfigFromGguf(*file);
      if (!c.ok()) return c.status();
      std::unique_ptr<TensorSource> source =
          c->ZeroCenteredNorms() ? MakeGgufHybridSource(file, *c)
                                 : MakeGgufSource(file);
      return Assemble(std::move(*c), *source, *format);
    }
    case ModelFormat::kSafetensors: {
      absl::StatusOr<std::unique_ptr<SafetensorsModel>> m =
          SafetensorsModel::Open(path);
      if (!m.ok()) return m.status();
      std::shared_ptr<const SafetensorsModel> model = std::move(*m);
      absl::StatusOr<ModelConfig> c = SafetensorsConfig(*model);
      if (!c.ok()) return c.status();
      auto w = Assemble(std::move(*c), *MakeSafetensorsSource(model), *format);
      if (!w.ok()) return w;
      (*w)->tokenizer_path = model->tokenizer_json();
      if (absl::Status s = SafetensorsVision(model, **w); !s.ok()) return s;
      return w;
    }
    case ModelFormat::kLlama2c: {
      absl::StatusOr<Llama2cCheckpoint> ckpt = Llama2cCheckpoint::Open(path);
      if (!ckpt.ok()) return ckpt.status();
      ModelConfig c = ConfigFromLlama2c(ckpt->header, ModelNameFromPath(path));
      if (absl::Status s = ValidateModelConfig(c, path); !s.ok()) return s;
      return Assemble(std::move(c), *MakeLlama2cSource(std::move(*ckpt)),
                      *format);
    }
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& path) {
  absl::StatusOr<ModelFormat> format = DetectModelFormat(path);
  if (!format.ok()) return format.status();
  switch (*format) {
    case ModelFormat::kGguf: {
      absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
      if (!f.ok()) return f.status();
      return ConfigFromGguf(**f);
    }
    case ModelFormat::kSafetensors: {
      const std::string dir = ModelDir(path);
      const std::string config_path = dir + "/config.json";
      std::ifstream in(config_path);
      if (!in) {
        return absl::NotFoundError(absl::StrCat(config_path, ": not found"));
      }
      nlohmann::json j;
      try {
        in >> j;
      } catch (const nlohmann::json::exception& e) {
        return absl::InvalidArgumentError(
            absl::StrCat(config_path, ": bad JSON: ", e.what()));
      }
      return HfConfig(j, dir, VisionMode::kLenient);
    }
    case ModelFormat::kLlama2c: {
      char head[28];
      std::ifstream in(path, std::ios::binary);
      in.read(head, sizeof(head));
      absl::StatusOr<Llama2cHeader> h =
          ParseLlama2cHeader(path, head, in.gcount());
      if (!h.ok()) return h.status();
      ModelConfig c = ConfigFromLlama2c(*h, ModelNameFromPath(path));
      if (absl::Status s = ValidateModelConfig(c, path); !s.ok()) return s;
      return c;
    }
  }
  return absl::InternalError("unreachable");
}

}  // namespace pdserve
