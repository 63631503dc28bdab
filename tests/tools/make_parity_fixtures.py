#!/usr/bin/env python3
"""Builds the Hugging Face parity fixtures under tests/data/parity/.

The C++ test tests/engine/model_parity_test.cc loads these models with
pdserve's loader, runs the same tokens through ForwardPass and requires every
logit to match transformers' within 1e-4 absolute (fp32).

Fixtures written (all small; commit them):
  tiny_llama/   config.json + model.safetensors: random fp32 LlamaForCausalLM
                (GQA 4 q heads / 2 kv heads, untied LM head)
  tiny_qwen3/   random fp32 Qwen3ForCausalLM (q/k head RMSNorm,
                head_dim 24 != hidden 64 / 4 heads, tied embeddings)
  <name>/expected.json  prompt ids, greedy decode ids, shapes
  <name>/expected_logits.f32  little-endian f32: [16 prefill rows][vocab] then
                [16 decode rows][vocab]
  stories260K/expected.json + expected_logits.f32: the llama2.c checkpoint
                ../shared/models/stories260K/stories260K.bin converted here to
                a transformers LlamaForCausalLM (wq/wk permuted from the
                interleaved Meta RoPE layout to HF's half-split layout, as
                llama2.c's export script does); the C++ test loads the
                ORIGINAL .bin.
  smollm2_q4_1.json  (only when ~/.cache/pdserve/models/
                SmolLM2-135M-Instruct.Q4_1.gguf exists): transformers loads the
                GGUF (dequantized to fp32); 32 greedy steps from a ChatML
                prompt: prompt ids, reference tokens and the top-8 logits of
                every step.

Decode semantics: after the 16-token prefill, step k feeds decode_ids[k] (the
argmax of the previous row) at position 16 + k and records its logits; the
greedy choice is checked to have a top-1/top-2 margin > 1e-3 so that a 1e-4
error can never flip it.

Environment: a venv with torch (CPU), transformers, safetensors, numpy and, for
the GGUF part, gguf:
  python3 -m venv V && V/bin/pip install torch transformers safetensors numpy \
      gguf accelerate
Run: V/bin/python tests/tools/make_parity_fixtures.py   (here: /opt/pyref/venv)
If torch there is a CUDA build whose libraries are missing, see
tests/tools/pyref_env.sh.
"""

import json
import os
import struct
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "parity")
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
CACHE = os.environ.get("PDSERVE_CACHE", os.path.expanduser("~/.cache/pdserve"))

PREFILL = 16
DECODE = 16


def randomize(model, seed):
    """Replaces HF's tiny init (std 0.02) by weights that give O(1) logits and
    non-trivial attention, so that a 1e-4 tolerance is a real check."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm weights
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[1]
                scale = 1.5 / fan_in ** 0.5
                if "embed_tokens" in name:
                    # Tied models reuse it as the LM head: keep logits O(5).
                    scale = 0.4 if model.config.tie_word_embeddings else 1.0
                p.copy_(scale * torch.randn(p.shape, generator=g))


def run_reference(model, prompt):
    """Prefill logits for every prompt position, then greedy decode steps."""
    with torch.no_grad():
        ids = torch.tensor([prompt])
        out = model(input_ids=ids, use_cache=True)
        prefill = out.logits[0].float().numpy()
        past = out.past_key_values
        last = prefill[-1]
        decode_ids, decode_logits, margins = [], [], []
        for _ in range(DECODE):
            order = np.argsort(-last)
            margins.append(float(last[order[0]] - last[order[1]]))
            nxt = int(order[0])
            decode_ids.append(nxt)
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
            last = out.logits[0, -1].float().numpy()
            decode_logits.append(last)
    return prefill, decode_ids, np.stack(decode_logits), min(margins)


def write_fixture(folder, prompt, prefill, decode_ids, decode_logits, extra):
    os.makedirs(folder, exist_ok=True)
    vocab = prefill.shape[1]
    meta = dict(extra)
    meta.update({
        "prompt_ids": [int(t) for t in prompt],
        "decode_ids": decode_ids,
        "vocab_size": int(vocab),
        "prefill_rows": int(prefill.shape[0]),
        "decode_rows": int(decode_logits.shape[0]),
        "logits_file": "expected_logits.f32",
    })
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    both = np.concatenate([prefill, decode_logits]).astype("<f4")
    both.tofile(os.path.join(folder, "expected_logits.f32"))


def make_random(kind, seed):
    from transformers import (LlamaConfig, LlamaForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM)
    common = dict(vocab_size=96, hidden_size=64, intermediate_size=96,
                  num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256,
                  bos_token_id=1, eos_token_id=2)
    if kind == "llama":
        cfg = LlamaConfig(rms_norm_eps=1e-5, tie_word_embeddings=False,
                          rope_parameters={"rope_type": "default",
                                           "rope_theta": 10000.0},
                          **common)
        model = LlamaForCausalLM(cfg)
        theta = 10000.0
    else:
        cfg = Qwen3Config(head_dim=24, rms_norm_eps=1e-6,
                          tie_word_embeddings=True,
                          rope_parameters={"rope_type": "default",
                                           "rope_theta": 1000000.0},
                          **common)
        model = Qwen3ForCausalLM(cfg)
        theta = 1000000.0
    model = model.float().eval()
    for attempt in range(20):
        randomize(model, seed + attempt)
        if kind == "qwen3":
            model.tie_weights()
        g = np.random.default_rng(seed + attempt)
        prompt = [1] + [int(t) for t in g.integers(3, 96, PREFILL - 1)]
        prefill, dec_ids, dec_logits, margin = run_reference(model, prompt)
        if margin > 1e-3:
            break
    else:
        raise SystemExit(f"{kind}: no seed gave greedy margins > 1e-3")
    folder = os.path.join(OUT, f"tiny_{kind}")
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    # transformers 5 writes rope_parameters only; most published config.json
    # files (transformers 4.x) carry rope_theta at the top level. Write both.
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        conf = json.load(f)
    conf["rope_theta"] = theta
    conf["torch_dtype"] = "float32"
    with open(path, "w") as f:
        json.dump(conf, f, indent=2)
        f.write("\n")
    for stray in ("generation_config.json",):
        p = os.path.join(folder, stray)
        if os.path.exists(p):
            os.remove(p)
    write_fixture(folder, prompt, prefill, dec_ids, dec_logits,
                  {"model": f"tiny_{kind}", "min_greedy_margin": margin})
    print(f"tiny_{kind}: min greedy margin {margin:.4f}, "
          f"logit range [{prefill.min():.2f}, {prefill.max():.2f}]")


def read_llama2c(path):
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = struct.unpack(
        "7i", data[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    w = np.frombuffer(data, dtype="<f4", offset=28)
    hs = dim // heads
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        out = w[pos:pos + n].reshape(shape)
        pos += n
        return out

    t = {"dims": (dim, hidden, layers, heads, kv_heads, vocab, seq_len)}
    t["emb"] = take(vocab, dim)
    t["rms_att"] = take(layers, dim)
    t["wq"] = take(layers, heads * hs, dim)
    t["wk"] = take(layers, kv_heads * hs, dim)
    t["wv"] = take(layers, kv_heads * hs, dim)
    t["wo"] = take(layers, dim, heads * hs)
    t["rms_ffn"] = take(layers, dim)
    t["w1"] = take(layers, hidden, dim)
    t["w2"] = take(layers, dim, hidden)
    t["w3"] = take(layers, hidden, dim)
    t["rms_final"] = take(dim)
    take(seq_len, hs // 2)  # freq_cis_real (unused)
    take(seq_len, hs // 2)  # freq_cis_imag
    t["wcls"] = t["emb"] if shared else take(vocab, dim)
    t["shared"] = shared
    return t


def permute_meta_to_hf(w, n_heads):
    """Interleaved (2i, 2i+1) rotary pairs -> HF rotate_half (i, i + d/2),
    exactly as transformers' convert_llama_weights_to_hf.py does."""
    dim1, dim2 = w.shape
    return (w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2)
            .transpose(0, 2, 1, 3).reshape(dim1, dim2))


def make_stories(seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    path = os.path.join(SHARED, "models", "stories260K", "stories260K.bin")
    if not os.path.exists(path):
        print(f"stories260K: {path} absent, skipped")
        return
    t = read_llama2c(path)
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = t["dims"]
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=dim,
                      intermediate_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads,
                      max_position_embeddings=seq_len, rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default",
                                       "rope_theta": 10000.0},
                      tie_word_embeddings=t["shared"], bos_token_id=1,
                      eos_token_id=2)
    model = LlamaForCausalLM(cfg).float().eval()
    sd = {"model.embed_tokens.weight": t["emb"],
          "model.norm.weight": t["rms_final"], "lm_head.weight": t["wcls"]}
    for i in range(layers):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = t["rms_att"][i]
        sd[p + "self_attn.q_proj.weight"] = permute_meta_to_hf(t["wq"][i], heads)
        sd[p + "self_attn.k_proj.weight"] = permute_meta_to_hf(t["wk"][i],
                                                               kv_heads)
        sd[p + "self_attn.v_proj.weight"] = t["wv"][i]
        sd[p + "self_attn.o_proj.weight"] = t["wo"][i]
        sd[p + "post_attention_layernorm.weight"] = t["rms_ffn"][i]
        sd[p + "mlp.gate_proj.weight"] = t["w1"][i]
        sd[p + "mlp.down_proj.weight"] = t["w2"][i]
        sd[p + "mlp.up_proj.weight"] = t["w3"][i]
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if "rotary" not in m]
    if missing or unexpected:
        raise SystemExit(f"stories260K: missing {missing}, unexpected {unexpected}")
    # A prompt of real tokens (BOS + random ids); greedy continues it.
    g = np.random.default_rng(seed)
    for attempt in range(20):
        prompt = [1] + [int(t) for t in g.integers(3, vocab, PREFILL - 1)]
        prefill, dec_ids, dec_logits, margin = run_reference(model, prompt)
        if margin > 1e-3:
            break
    write_fixture(os.path.join(OUT, "stories260K"), prompt, prefill, dec_ids,
                  dec_logits, {"model": "stories260K.bin",
                               "min_greedy_margin": margin})
    print(f"stories260K: min greedy margin {margin:.4f}")


SMOL_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
SMOL_USERS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a short story about a cat who learns to fly.",
    "Count from one to ten.",
    "Repeat after me: The quick brown fox jumps over the lazy dog.",
    "Recite the English alphabet.",
    "Count from 1 to 20, separated by commas.",
    "List the days of the week.",
    "List the months of the year.",
    "Write the numbers from ten down to one.",
    "Spell the word 'computer' letter by letter.",
    "What are the first ten prime numbers?",
    "Write a haiku about autumn leaves.",
    "Explain what a computer is to a child.",
    "Give me a recipe for pancakes.",
]


def smol_greedy(model, prompt, steps, top_k):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        past, last = out.past_key_values, out.logits[0, -1].numpy()
        records = []
        for _ in range(steps):
            order = np.argsort(-last)[:top_k]
            records.append({"top_ids": [int(i) for i in order],
                            "top_logits": [float(last[i]) for i in order]})
            nxt = int(order[0])
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past,
                        use_cache=True)
            past, last = out.past_key_values, out.logits[0, -1].numpy()
    return records


def make_smollm2():
    """Of a few ChatML prompts, keeps the one whose 32 greedy steps have the
    largest smallest top-1/top-2 margin: the C++ side quantizes activations
    to 8 bits (as llama.cpp does), so near-ties would test rounding luck."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder = os.path.join(CACHE, "models")
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not os.path.exists(os.path.join(folder, name)):
        print(f"SmolLM2: {folder}/{name} absent, skipped")
        return
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32).eval()
    best = None
    for user in SMOL_USERS:
        text = (f"<|im_start|>system\n{SMOL_SYSTEM}<|im_end|>\n"
                f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
        prompt = tok(text, add_special_tokens=False)["input_ids"]
        records = smol_greedy(model, prompt, 32, 8)
        margin = min(r["top_logits"][0] - r["top_logits"][1] for r in records)
        print(f"SmolLM2: prompt {user!r}: min margin {margin:.3f}")
        if best is None or margin > best[0]:
            best = (margin, text, prompt, records)
    margin, text, prompt, records = best
    tokens = [r["top_ids"][0] for r in records]
    meta = {"model": name, "prompt_text": text, "prompt_ids": prompt,
            "greedy_ids": tokens, "min_greedy_margin": margin,
            "steps": records, "reference_text": tok.decode(tokens)}
    with open(os.path.join(OUT, "smollm2_q4_1.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"SmolLM2: kept {len(prompt)} prompt ids, min margin {margin:.3f}, "
          f"text {meta['reference_text']!r}")


def main():
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    which = sys.argv[1:] or ["llama", "qwen3", "stories", "smollm2"]
    if "llama" in which:
        make_random("llama", 1234)
    if "qwen3" in which:
        make_random("qwen3", 5678)
    if "stories" in which:
        make_stories(42)
    if "smollm2" in which:
        make_smollm2()


if __name__ == "__main__":
    main()
