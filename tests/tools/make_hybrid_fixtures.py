#!/usr/bin/env python3
"""Builds the Qwen3 MoE (and hybrid) golden fixtures under tests/data/hybrid/.

The C++ tests tests/engine/hybrid_*_test.cc load these models with pdserve's
loader, run the same tokens through ForwardPass and require every logit to
match transformers' within 1e-4 absolute (fp32).

Fixtures written (small; commit them):
  tiny_qwen3_moe/  config.json + model.safetensors: a random fp32
                   Qwen3MoeForCausalLM keeping the real structure (6 experts,
                   top-3, renormalised top-k, q/k head norm, GQA), layer 1 a
                   dense MLP (mlp_only_layers) between two sparse layers.
                   Expert weights are stored under the per-expert names that
                   published checkpoints use
                   (model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight).
  tiny_qwen35/     config.json + model.safetensors: a random fp32
                   Qwen3_5ForCausalLM (Qwen3.5 text): Gated DeltaNet layers
                   (2 key heads shared by 4 value heads, conv kernel 4)
                   interleaved with output-gated full attention
                   (full_attention_interval 2), zero-centred RMSNorms,
                   partial RoPE (0.5) with mRoPE sections [2, 1, 1].
  tiny_qwen3_next/ a random fp32 Qwen3NextForCausalLM: the same hybrid
                   pattern with fused in_proj_qkvz / in_proj_ba (grouped per
                   key head), partial RoPE 0.25 without mRoPE, and a sparse
                   MoE (4 experts, top-2) with a sigmoid-gated shared expert;
                   experts stored per expert as in published checkpoints.
  <name>/expected.json        prompt ids, greedy decode ids, shapes
  <name>/expected_logits.f32  little-endian f32: [32 prefill rows][vocab]
                              then [16 decode rows][vocab]

Decode semantics: after the 32-token prefill, step k feeds decode_ids[k] (the
argmax of the previous row) at position 32 + k and records its logits; every
greedy choice has a top-1/top-2 margin > 1e-3 so a 1e-4 error cannot flip it.

Environment: a venv with torch (CPU), transformers (>= 5), safetensors, numpy:
  python3 -m venv V && V/bin/pip install torch transformers safetensors numpy
Run: V/bin/python tests/tools/make_hybrid_fixtures.py [qwen3_moe] [qwen35] [qwen3_next]
(here: /opt/pyref/venv)
"""

import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "hybrid")

PREFILL = 32
DECODE = 16


def randomize(model, seed):
    """O(1) logits and routing that is far from uniform (router scale 3)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
                continue
            fan_in = p.shape[-1]
            scale = 1.5 / fan_in ** 0.5
            if "embed_tokens" in name:
                scale = 1.0
            if name.endswith("mlp.gate.weight"):
                scale = 3.0 / fan_in ** 0.5
            p.copy_(scale * torch.randn(p.shape, generator=g))


def run_reference(model, prompt):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        prefill = out.logits[0].float().numpy()
        past = out.past_key_values
        last = prefill[-1]
        ids, rows, margins = [], [], []
        for _ in range(DECODE):
            order = np.argsort(-last)
            margins.append(float(last[order[0]] - last[order[1]]))
            nxt = int(order[0])
            ids.append(nxt)
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
            last = out.logits[0, -1].float().numpy()
            rows.append(last)
    return prefill, ids, np.stack(rows), min(margins)


def write_expected(folder, prompt, prefill, ids, rows, extra):
    meta = dict(extra)
    meta.update({
        "prompt_ids": [int(t) for t in prompt],
        "decode_ids": ids,
        "vocab_size": int(prefill.shape[1]),
        "prefill_rows": int(prefill.shape[0]),
        "decode_rows": int(rows.shape[0]),
        "logits_file": "expected_logits.f32",
    })
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    np.concatenate([prefill, rows]).astype("<f4").tofile(
        os.path.join(folder, "expected_logits.f32"))


def per_expert_state_dict(model):
    """HF checkpoint layout: fused v5 expert tensors split per expert."""
    out = {}
    for name, t in model.state_dict().items():
        t = t.detach().float().contiguous()
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :inter].clone()
                out[f"{base}{e}.up_proj.weight"] = t[e, inter:].clone()
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e].clone()
        else:
            out[name] = t.clone()
    return out


def make_qwen3_moe(seed):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(
        vocab_size=80, hidden_size=32, intermediate_size=48,
        moe_intermediate_size=16, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_experts=6,
        num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[1], max_position_embeddings=256, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    model = Qwen3MoeForCausalLM(cfg).float().eval()
    for attempt in range(40):
        randomize(model, seed + attempt)
        g = np.random.default_rng(seed + attempt)
        prompt = [1] + [int(t) for t in g.integers(3, 80, PREFILL - 1)]
        prefill, ids, rows, margin = run_reference(model, prompt)
        if margin > 1e-3:
            break
    else:
        raise SystemExit("qwen3_moe: no seed gave greedy margins > 1e-3")
    folder = os.path.join(OUT, "tiny_qwen3_moe")
    os.makedirs(folder, exist_ok=True)
    conf = cfg.to_dict()
    conf["architectures"] = ["Qwen3MoeForCausalLM"]
    conf["rope_theta"] = 1000000.0
    conf["torch_dtype"] = "float32"
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(conf, f, indent=1, sort_keys=True)
        f.write("\n")
    save_file(per_expert_state_dict(model),
              os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    write_expected(folder, prompt, prefill, ids, rows,
                   {"model": "tiny_qwen3_moe", "min_greedy_margin": margin})
    print(f"tiny_qwen3_moe: min greedy margin {margin:.4f}, "
          f"logit range [{prefill.min():.2f}, {prefill.max():.2f}]")


def randomize_qwen35(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if name.endswith("A_log"):
                p.copy_(0.5 * r)               # A = exp(A_log) around 1
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * r)
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.2 * r)         # plain gated RMSNorm weight
            elif p.dim() == 1:
                p.copy_(0.2 * r)               # zero-centred: x * (1 + w)
            elif name.endswith("conv1d.weight"):
                p.copy_(0.5 * r)
            elif "embed_tokens" in name:
                p.copy_(r)
            else:
                p.copy_(1.5 / p.shape[-1] ** 0.5 * r)


def make_qwen35(seed):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    cfg = Qwen3_5TextConfig(
        vocab_size=80, hidden_size=32, intermediate_size=48,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, full_attention_interval=2,
        max_position_embeddings=256, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5,
                         "mrope_section": [2, 1, 1]})
    model = Qwen3_5ForCausalLM(cfg).float().eval()
    for attempt in range(40):
        randomize_qwen35(model, seed + attempt)
        g = np.random.default_rng(seed + attempt)
        prompt = [1] + [int(t) for t in g.integers(3, 80, PREFILL - 1)]
        prefill, ids, rows, margin = run_reference(model, prompt)
        if margin > 1e-3:
            break
    else:
        raise SystemExit("qwen35: no seed gave greedy margins > 1e-3")
    folder = os.path.join(OUT, "tiny_qwen35")
    os.makedirs(folder, exist_ok=True)
    conf = cfg.to_dict()
    conf["architectures"] = ["Qwen3_5ForCausalLM"]
    conf["torch_dtype"] = "float32"
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(conf, f, indent=1, sort_keys=True)
        f.write("\n")
    state = {k: v.detach().float().contiguous().clone()
             for k, v in model.state_dict().items()}
    save_file(state, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    write_expected(folder, prompt, prefill, ids, rows,
                   {"model": "tiny_qwen35", "min_greedy_margin": margin})
    print(f"tiny_qwen35: min greedy margin {margin:.4f}, "
          f"logit range [{prefill.min():.2f}, {prefill.max():.2f}]")


def make_qwen3_next(seed):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    cfg = Qwen3NextConfig(
        vocab_size=80, hidden_size=32, intermediate_size=48,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=8,
        linear_conv_kernel_dim=4, full_attention_interval=2,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=24, norm_topk_prob=True,
        decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=256, rms_norm_eps=1e-6,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25})
    model = Qwen3NextForCausalLM(cfg).float().eval()
    for attempt in range(40):
        randomize_qwen35(model, seed + attempt)
        g = np.random.default_rng(seed + attempt)
        prompt = [1] + [int(t) for t in g.integers(3, 80, PREFILL - 1)]
        prefill, ids, rows, margin = run_reference(model, prompt)
        if margin > 1e-3:
            break
    else:
        raise SystemExit("qwen3_next: no seed gave greedy margins > 1e-3")
    folder = os.path.join(OUT, "tiny_qwen3_next")
    os.makedirs(folder, exist_ok=True)
    conf = cfg.to_dict()
    conf["architectures"] = ["Qwen3NextForCausalLM"]
    conf["torch_dtype"] = "float32"
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(conf, f, indent=1, sort_keys=True)
        f.write("\n")
    save_file(per_expert_state_dict(model),
              os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    write_expected(folder, prompt, prefill, ids, rows,
                   {"model": "tiny_qwen3_next", "min_greedy_margin": margin})
    print(f"tiny_qwen3_next: min greedy margin {margin:.4f}, "
          f"logit range [{prefill.min():.2f}, {prefill.max():.2f}]")


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    which = sys.argv[1:] or ["qwen3_moe", "qwen35", "qwen3_next"]
    if "qwen3_moe" in which:
        make_qwen3_moe(100)
    if "qwen35" in which:
        make_qwen35(200)
    if "qwen3_next" in which:
        make_qwen3_next(300)
