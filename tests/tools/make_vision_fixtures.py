#!/usr/bin/env python3
"""Builds the Qwen3.5 vision fixtures under tests/data/vision/.

The C++ tests (tests/engine/vision_*_test.cc) decode the same image files with
pdserve's own decoders, preprocess them and run the tiny vision-language model,
and compare with what transformers' processor and model produce here.

Written (small; commit them):
  images/*.png|jpg|webp   deterministic test images (RGB, RGBA, grey,
                          palette, JPEG 4:2:0, lossy and lossless WebP, an
                          extreme aspect ratio)
  preprocess.json         per case: image, min/max pixels, grid_thw, the
                          offset of its pixel levels in preprocess_levels.u8
  preprocess_levels.u8    the reference's pixel_values as uint8 levels:
                          pixel_values = (level / 255 - 0.5) / 0.5 exactly
                          (checked here), [patches][3 * 2 * 16 * 16] per case
  smart_resize.json       smart_resize(h, w, 32, min, max) for random sizes
                          (and the aspect-ratio refusals)
  tiny_qwen35_vl/         config.json + preprocessor_config.json +
                          model.safetensors: a random fp32
                          Qwen3_5ForConditionalGeneration (the tiny_qwen35
                          text shapes, a 2-block vision tower of width 32,
                          patch 16, a 4x4 learned position grid)
  tiny_qwen35_vl/encoder.json + encoder_out.f32: the vision tower's merged
                          outputs (pooler_output) per image, one call per
                          image and one call for all of them together
  tiny_qwen35_vl/expected.json + expected_logits.f32: a prompt with two
                          images of different sizes and text: its 3D
                          position ids and rope delta (get_rope_index), the
                          prefill logits of every row, then 16 greedy decode
                          steps (the logits of each)
  tiny_qwen35_vl/rope_index.json: get_rope_index on more prompts (an image
                          first, last, three images, none)
  tiny_qwen35_vl/tokenizer.json + tokenizer_config.json: an 80-token
                          byte-level BPE vocabulary (letters, digits, some
                          punctuation, Qwen's special tokens at the ids the
                          config names) with a small Qwen3-VL-style chat
                          template, so that `pdserve serve` can run the
                          fixture end to end
  tiny_qwen35_vl/chat_golden.json: a chat request with two images through
                          that tokenizer and template (the processor's
                          placeholder expansion) and the model's 16 greedy
                          tokens (transformers), for the serve test

Environment: a venv with torch (CPU), torchvision, transformers (>= 5),
safetensors, numpy, pillow:
  . tests/tools/pyref_env.sh
  $PYREF_PYTHON tests/tools/make_vision_fixtures.py
"""

import io
import json
import math
import os

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "vision")
IMAGES = os.path.join(OUT, "images")
MODEL = os.path.join(OUT, "tiny_qwen35_vl")

PATCH, TEMPORAL, MERGE = 16, 2, 2
MEAN = STD = [0.5, 0.5, 0.5]
IMAGE_TOKEN, VIDEO_TOKEN, VISION_START, VISION_END = 75, 76, 73, 74
TINY_MIN_PIXELS, TINY_MAX_PIXELS = 64 * 64, 128 * 128
DECODE = 16


def pattern(h, w, seed, noise):
    """Smooth colour ramps and circles plus noise, uint8 [h][w][3]."""
    g = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 127 + 120 * np.sin(x / (3 + seed % 5) + y / 7.0)
    gr = 255 * x / max(w - 1, 1)
    b = 255 * ((x - w / 2) ** 2 + (y - h / 2) ** 2 < (min(h, w) / 3) ** 2)
    img = np.stack([r, gr, b], -1) + noise * g.standard_normal((h, w, 3))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def make_images():
    os.makedirs(IMAGES, exist_ok=True)
    made = {}

    def save(name, im, **kw):
        path = os.path.join(IMAGES, name)
        im.save(path, **kw)
        made[name] = path

    save("gradient_37x53.png", Image.fromarray(pattern(37, 53, 1, 4)))
    save("noise_48x64.png", Image.fromarray(pattern(48, 64, 2, 40)))
    rgba = np.concatenate([pattern(30, 70, 3, 10),
                           pattern(30, 70, 4, 60)[:, :, :1]], -1)
    save("rgba_30x70.png", Image.fromarray(rgba, "RGBA"))
    save("gray_45x45.png", Image.fromarray(pattern(45, 45, 5, 20)[:, :, 1], "L"))
    save("palette_40x24.png",
         Image.fromarray(pattern(40, 24, 6, 30)).quantize(colors=16))
    save("photo_90x70.jpg", Image.fromarray(pattern(90, 70, 7, 12)),
         quality=90)
    save("lossy_50x40.webp", Image.fromarray(pattern(50, 40, 8, 8)),
         quality=80)
    save("lossless_33x66.webp", Image.fromarray(pattern(33, 66, 9, 25)),
         lossless=True)
    save("tall_20x300.png", Image.fromarray(pattern(20, 300, 10, 6)))
    save("big_96x128.png", Image.fromarray(pattern(96, 128, 11, 15)))
    return made


def processor(min_pixels, max_pixels):
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
        Qwen2VLImageProcessor)
    return Qwen2VLImageProcessor(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        patch_size=PATCH, temporal_patch_size=TEMPORAL, merge_size=MERGE,
        image_mean=MEAN, image_std=STD)


def preprocess(path, min_pixels, max_pixels):
    im = Image.open(path)
    out = processor(min_pixels, max_pixels)(images=[im], return_tensors="pt")
    return out["pixel_values"].float(), out["image_grid_thw"][0].tolist()


def to_levels(pv):
    levels = np.rint((pv.numpy().astype(np.float64) * 0.5 + 0.5) * 255)
    assert levels.min() >= 0 and levels.max() <= 255
    back = (torch.tensor(levels, dtype=torch.float32) / 255 - 0.5) / 0.5
    err = float((back - pv).abs().max())
    assert err < 1e-6, f"pixel values are not uint8 levels (err {err})"
    return levels.astype(np.uint8)


PREPROCESS_CASES = [
    ("gradient_37x53.png", 1024, 9216),
    ("noise_48x64.png", 1024, 9216),
    ("rgba_30x70.png", 1024, 9216),
    ("gray_45x45.png", 1024, 9216),
    ("palette_40x24.png", 1024, 9216),
    ("photo_90x70.jpg", 1024, 9216),
    ("lossy_50x40.webp", 1024, 9216),
    ("lossless_33x66.webp", 1024, 9216),
    ("tall_20x300.png", 1024, 9216),     # downscaled (max_pixels)
    ("gradient_37x53.png", 8192, 16384),  # upscaled (min_pixels)
    ("big_96x128.png", 1024, 6000),       # downscaled
]


def make_preprocess(images):
    cases, blobs, offset = [], [], 0
    for name, lo, hi in PREPROCESS_CASES:
        pv, grid = preprocess(images[name], lo, hi)
        levels = to_levels(pv)
        cases.append({"image": name, "min_pixels": lo, "max_pixels": hi,
                      "grid_thw": grid, "offset": offset,
                      "patches": int(pv.shape[0]),
                      "patch_dim": int(pv.shape[1])})
        blobs.append(levels.reshape(-1))
        offset += levels.size
    np.concatenate(blobs).tofile(os.path.join(OUT, "preprocess_levels.u8"))
    with open(os.path.join(OUT, "preprocess.json"), "w") as f:
        json.dump({"patch_size": PATCH, "temporal_patch_size": TEMPORAL,
                   "merge_size": MERGE, "image_mean": MEAN,
                   "image_std": STD, "levels_file": "preprocess_levels.u8",
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"preprocess: {len(cases)} cases, {offset} levels")


def make_smart_resize():
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import (
        smart_resize)
    g = np.random.default_rng(5)
    rows = []
    limits = [(65536, 16777216), (4096, 16384), (1024, 9216),
              (56 * 56, 28 * 28 * 1280)]
    for i in range(400):
        lo, hi = limits[i % len(limits)]
        h = int(np.exp(g.uniform(0, np.log(5000))))
        w = int(np.exp(g.uniform(0, np.log(5000))))
        if i % 50 == 0:
            h, w = 3, 700  # aspect ratio > 200
        try:
            rh, rw = smart_resize(h, w, PATCH * MERGE, lo, hi)
            rows.append([h, w, lo, hi, rh, rw])
        except ValueError:
            rows.append([h, w, lo, hi, -1, -1])
    with open(os.path.join(OUT, "smart_resize.json"), "w") as f:
        json.dump({"factor": PATCH * MERGE,
                   "columns": ["height", "width", "min_pixels", "max_pixels",
                               "resized_height", "resized_width"],
                   "rows": rows}, f)
        f.write("\n")


def tiny_config():
    from transformers import Qwen3_5Config
    return Qwen3_5Config(
        text_config=dict(
            vocab_size=80, hidden_size=32, intermediate_size=48,
            num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=8,
            linear_value_head_dim=8, linear_conv_kernel_dim=4,
            full_attention_interval=2, max_position_embeddings=256,
            rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1,
            eos_token_id=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.5,
                             "mrope_section": [2, 1, 1]}),
        vision_config=dict(
            depth=2, hidden_size=32, num_heads=2, intermediate_size=48,
            patch_size=PATCH, temporal_patch_size=TEMPORAL,
            spatial_merge_size=MERGE, out_hidden_size=32,
            num_position_embeddings=16, in_channels=3,
            hidden_act="gelu_pytorch_tanh"),
        image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN,
        vision_start_token_id=VISION_START, vision_end_token_id=VISION_END,
        tie_word_embeddings=False)


def randomize(model, seed):
    """The tiny_qwen35 recipe for the language model; O(1) activations in
    the vision tower (LayerNorm weights around 1, biases around 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if name.endswith("A_log") or name.endswith("dt_bias"):
                p.copy_(0.5 * r)
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.2 * r)
            elif "visual" in name and name.endswith("bias"):
                p.copy_(0.1 * r)
            elif "visual" in name and p.dim() == 1:
                p.copy_(1.0 + 0.2 * r)       # LayerNorm weights
            elif p.dim() == 1:
                p.copy_(0.2 * r)             # zero-centred RMSNorm
            elif name.endswith("conv1d.weight"):
                p.copy_(0.5 * r)
            elif "embed_tokens" in name or "pos_embed" in name:
                p.copy_(r)
            else:
                fan_in = p[0].numel()
                p.copy_(1.5 / fan_in ** 0.5 * r)


def encode(model, pixel_values, grids):
    out = model.model.get_image_features(
        pixel_values, torch.tensor(grids, dtype=torch.long), return_dict=True)
    return [t.float() for t in out.pooler_output]


def mm_types(ids):
    return torch.tensor([[1 if t == IMAGE_TOKEN else 0 for t in ids]])


def image_tokens(grid):
    return grid[0] * grid[1] * grid[2] // (MERGE * MERGE)


def run_prompt(model, ids, pixel_values, grids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), pixel_values=pixel_values,
                    image_grid_thw=torch.tensor(grids, dtype=torch.long),
                    mm_token_type_ids=mm_types(ids), use_cache=True)
        prefill = out.logits[0].float().numpy()
        past = out.past_key_values
        last = prefill[-1]
        ids_out, rows, margins = [], [], []
        for _ in range(DECODE):
            order = np.argsort(-last)
            margins.append(float(last[order[0]] - last[order[1]]))
            nxt = int(order[0])
            ids_out.append(nxt)
            out = model(input_ids=torch.tensor([[nxt]]), past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
            last = out.logits[0, -1].float().numpy()
            rows.append(last)
    return prefill, ids_out, np.stack(rows), min(margins)


def rope_index(model, ids, grids):
    pos, delta = model.model.get_rope_index(
        torch.tensor([ids]), mm_token_type_ids=mm_types(ids),
        image_grid_thw=torch.tensor(grids, dtype=torch.long) if grids else None)
    return pos[:, 0].tolist(), int(delta[0, 0])


def with_image(grid):
    return [VISION_START] + [IMAGE_TOKEN] * image_tokens(grid) + [VISION_END]


def make_model(images, seed):
    from transformers import Qwen3_5ForConditionalGeneration
    cfg = tiny_config()
    model = Qwen3_5ForConditionalGeneration(cfg).float().eval()
    lm_images = ["photo_90x70.jpg", "noise_48x64.png"]
    pvs, grids = zip(*[preprocess(images[n], TINY_MIN_PIXELS,
                                  TINY_MAX_PIXELS) for n in lm_images])
    pixel_values = torch.cat(pvs)
    grids = [list(g) for g in grids]
    g = np.random.default_rng(seed)
    text = lambda n: [int(t) for t in g.integers(3, 70, n)]
    ids = ([1] + text(5) + with_image(grids[0]) + text(4) +
           with_image(grids[1]) + text(6))
    for attempt in range(40):
        randomize(model, seed + attempt)
        prefill, out_ids, rows, margin = run_prompt(model, ids, pixel_values,
                                                    grids)
        if margin > 1e-3:
            break
    else:
        raise SystemExit("tiny_qwen35_vl: no seed gave greedy margins > 1e-3")
    os.makedirs(MODEL, exist_ok=True)
    conf = cfg.to_dict()
    conf["architectures"] = ["Qwen3_5ForConditionalGeneration"]
    conf["torch_dtype"] = "float32"
    with open(os.path.join(MODEL, "config.json"), "w") as f:
        json.dump(conf, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(MODEL, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Qwen2VLImageProcessorFast",
                   "processor_class": "Qwen3VLProcessor",
                   "do_resize": True, "do_rescale": True,
                   "do_normalize": True, "do_convert_rgb": True,
                   "resample": 3, "rescale_factor": 1 / 255,
                   "patch_size": PATCH, "temporal_patch_size": TEMPORAL,
                   "merge_size": MERGE, "image_mean": MEAN,
                   "image_std": STD,
                   "size": {"shortest_edge": TINY_MIN_PIXELS,
                            "longest_edge": TINY_MAX_PIXELS}}, f, indent=1)
        f.write("\n")
    state = {k: v.detach().float().contiguous().clone()
             for k, v in model.state_dict().items()}
    save_file(state, os.path.join(MODEL, "model.safetensors"),
              metadata={"format": "pt"})
    positions, delta = rope_index(model, ids, grids)
    meta = {"model": "tiny_qwen35_vl", "min_greedy_margin": margin,
            "images": lm_images, "grid_thw": grids,
            "min_pixels": TINY_MIN_PIXELS, "max_pixels": TINY_MAX_PIXELS,
            "prompt_ids": ids, "position_ids": positions,
            "rope_delta": delta, "decode_ids": out_ids,
            "vocab_size": int(prefill.shape[1]),
            "prefill_rows": int(prefill.shape[0]),
            "decode_rows": int(rows.shape[0]),
            "logits_file": "expected_logits.f32"}
    with open(os.path.join(MODEL, "expected.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    np.concatenate([prefill, rows]).astype("<f4").tofile(
        os.path.join(MODEL, "expected_logits.f32"))
    print(f"tiny_qwen35_vl: {len(ids)} prompt tokens, grids {grids}, "
          f"rope delta {delta}, min greedy margin {margin:.4f}")
    return model


def make_encoder(model, images):
    names = ["photo_90x70.jpg", "noise_48x64.png", "big_96x128.png",
             "gradient_37x53.png"]
    pvs, grids = zip(*[preprocess(images[n], TINY_MIN_PIXELS,
                                  TINY_MAX_PIXELS) for n in names])
    grids = [list(gr) for gr in grids]
    with torch.no_grad():
        single = [encode(model, pv, [gr])[0] for pv, gr in zip(pvs, grids)]
        joint = encode(model, torch.cat(pvs), grids)
    worst = max(float((a - b).abs().max()) for a, b in zip(single, joint))
    entries, blobs, offset = [], [], 0
    for name, gr, emb in zip(names, grids, single):
        entries.append({"image": name, "grid_thw": gr, "offset": offset,
                        "tokens": int(emb.shape[0]),
                        "width": int(emb.shape[1])})
        blobs.append(emb.numpy().reshape(-1))
        offset += emb.numel()
    np.concatenate(blobs).astype("<f4").tofile(
        os.path.join(MODEL, "encoder_out.f32"))
    with open(os.path.join(MODEL, "encoder.json"), "w") as f:
        json.dump({"min_pixels": TINY_MIN_PIXELS,
                   "max_pixels": TINY_MAX_PIXELS,
                   "joint_vs_single_max_diff": worst,
                   "file": "encoder_out.f32", "images": entries}, f, indent=1)
        f.write("\n")
    print(f"encoder: {len(names)} images, joint vs single {worst:.2e}")


def make_rope_cases(model):
    grids = [[1, 6, 4], [1, 4, 4], [1, 8, 6], [1, 2, 4]]
    cases = []
    prompts = [
        ("two images and text", [1, 5, 6] + with_image(grids[0]) + [7, 8] +
         with_image(grids[1]) + [9, 10, 11], grids[:2]),
        ("image first", with_image(grids[2]) + [5, 6, 7], grids[2:3]),
        ("image tokens first", [IMAGE_TOKEN] * image_tokens(grids[1]) +
         [VISION_END, 5, 6], grids[1:2]),
        ("image last", [1, 5, 6] + with_image(grids[3]), grids[3:4]),
        ("image tokens last", [1, 5, VISION_START] +
         [IMAGE_TOKEN] * image_tokens(grids[0]), grids[0:1]),
        ("three images", [1] + with_image(grids[0]) + with_image(grids[2]) +
         [5] + with_image(grids[3]) + [6], [grids[0], grids[2], grids[3]]),
        ("no image", [1, 5, 6, 7, 8, 9], []),
    ]
    for name, ids, gr in prompts:
        pos, delta = rope_index(model, ids, gr)
        cases.append({"name": name, "ids": ids, "grid_thw": gr,
                      "position_ids": pos, "rope_delta": delta})
    with open(os.path.join(MODEL, "rope_index.json"), "w") as f:
        json.dump({"image_token_id": IMAGE_TOKEN, "merge_size": MERGE,
                   "cases": cases}, f, indent=1)
        f.write("\n")


CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item['type'] == 'text' -%}{{- item['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}")

SPECIAL = {0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>",
           VISION_START: "<|vision_start|>", VISION_END: "<|vision_end|>",
           IMAGE_TOKEN: "<|image_pad|>", VIDEO_TOKEN: "<|video_pad|>"}


def make_tokenizer():
    """tokenizer.json in Qwen3's layout with an 80-token vocabulary."""
    chars = ([chr(c) for c in range(ord("a"), ord("z") + 1)] +
             ["\u0120", "\u010a"] +  # byte-level space and newline
             [str(d) for d in range(10)] +
             [chr(c) for c in range(ord("A"), ord("Z") + 1)] +
             list(".,!?:'") + list("-()"))
    # The special tokens sit in the model's vocabulary too (at the ids the
    # config names, inside the range), as well as in added_tokens.
    vocab, it = {}, iter(chars)
    for i in range(80):
        vocab[SPECIAL[i] if i in SPECIAL else next(it)] = i
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": (
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
            "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
            "\\s+(?!\\S)|\\s+")},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False,
         "trim_offsets": False, "use_regex": False}]}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False,
                  "trim_offsets": False, "use_regex": False}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
            for i, t in sorted(SPECIAL.items())],
        "normalizer": {"type": "NFC"}, "pre_tokenizer": pre,
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": vocab, "merges": []}}
    with open(os.path.join(MODEL, "tokenizer.json"), "w") as f:
        json.dump(tok, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(MODEL, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "Qwen2Tokenizer",
                   "add_bos_token": False, "add_prefix_space": False,
                   "bos_token": None, "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>", "unk_token": None,
                   "errors": "replace", "split_special_tokens": False,
                   "clean_up_tokenization_spaces": False,
                   "model_max_length": 256,
                   "chat_template": CHAT_TEMPLATE}, f, indent=1)
        f.write("\n")


def make_chat_golden(model, images):
    """A chat request with two images, as the processor and template make
    it, and its 16 greedy tokens."""
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(MODEL, "tokenizer.json"),
        eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    names = ["photo_90x70.jpg", "noise_48x64.png"]
    pvs, grids = zip(*[preprocess(images[n], TINY_MIN_PIXELS,
                                  TINY_MAX_PIXELS) for n in names])
    pixel_values = torch.cat(pvs)
    grids = [list(gr) for gr in grids]
    for first, second in [("what is in this picture", "and in this one"),
                          ("describe it", "compare with this"),
                          ("Look at this.", "Now this one!")]:
        messages = [{"role": "user", "content": [
            {"type": "image"}, {"type": "text", "text": first},
            {"type": "image"}, {"type": "text", "text": second}]}]
        text = tok.apply_chat_template(messages, tokenize=False,
                                       add_generation_prompt=True)
        for gr in grids:  # the processor's placeholder expansion
            text = text.replace("<|image_pad|>",
                                "<|placeholder|>" * image_tokens(gr), 1)
        text = text.replace("<|placeholder|>", "<|image_pad|>")
        ids = tok(text, add_special_tokens=False)["input_ids"]
        _, out_ids, _, margin = run_prompt(model, ids, pixel_values, grids)
        if margin > 1e-3:
            break
    else:
        raise SystemExit("chat golden: no prompt gave greedy margins > 1e-3")
    with open(os.path.join(MODEL, "chat_golden.json"), "w") as f:
        json.dump({"images": names, "grid_thw": grids,
                   "messages": [{"role": "user", "content": [
                       {"image": names[0]}, {"text": first},
                       {"image": names[1]}, {"text": second}]}],
                   "prompt_ids": ids, "decode_ids": out_ids,
                   "decode_text": tok.decode(out_ids),
                   "min_greedy_margin": margin}, f, indent=1)
        f.write("\n")
    print(f"chat golden: {len(ids)} prompt tokens, margin {margin:.4f}")


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    imgs = make_images()
    make_preprocess(imgs)
    make_smart_resize()
    vl = make_model(imgs, 400)
    make_encoder(vl, imgs)
    make_rope_cases(vl)
    make_tokenizer()
    make_chat_golden(vl, imgs)
