#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target under tests/fuzz/corpus/.

The seeds are small valid (or nearly valid) inputs built here byte by byte,
so the fuzzers start inside each format; regression inputs found by fuzzing
are kept beside them (files named after the defect) and this script leaves
them alone. Deterministic: running it again rewrites the same bytes.

    tests/fuzz/make_corpus.py
"""
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
CHAT = HERE.parent / "data" / "chat"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


# ---- GGUF (v3): header, metadata, tensor infos, aligned data ----
def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, vtype, payload):
    return gguf_str(key) + struct.pack("<I", vtype) + payload


def gguf_file(kvs, tensors, alignment=32):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    out += b"".join(kvs)
    offset = 0
    blobs = []
    for name, dims, ggml_type, blob in tensors:
        out += gguf_str(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
        blobs.append(blob)
        offset += (len(blob) + alignment - 1) // alignment * alignment
    out += b"\0" * ((-len(out)) % alignment)
    for blob in blobs:
        out += blob + b"\0" * ((-len(blob)) % alignment)
    return out


def gguf_seeds():
    tokens = ["<unk>", "<s>", "</s>", "a", "b", "ab", "\u2581a"]
    arr_tokens = struct.pack("<IQ", 8, len(tokens)) + b"".join(
        gguf_str(t) for t in tokens)
    scores = struct.pack("<IQ", 6, len(tokens)) + b"".join(
        struct.pack("<f", -i) for i in range(len(tokens)))
    types = struct.pack("<IQ", 5, len(tokens)) + b"".join(
        struct.pack("<i", 3 if i < 3 else 1) for i in range(len(tokens)))
    kvs = [
        gguf_kv("general.architecture", 8, gguf_str("llama")),
        gguf_kv("general.name", 8, gguf_str("fuzz")),
        gguf_kv("llama.context_length", 4, struct.pack("<I", 64)),
        gguf_kv("llama.embedding_length", 4, struct.pack("<I", 8)),
        gguf_kv("llama.block_count", 4, struct.pack("<I", 1)),
        gguf_kv("llama.feed_forward_length", 4, struct.pack("<I", 16)),
        gguf_kv("llama.attention.head_count", 4, struct.pack("<I", 2)),
        gguf_kv("llama.attention.layer_norm_rms_epsilon", 6,
                struct.pack("<f", 1e-5)),
        gguf_kv("tokenizer.ggml.model", 8, gguf_str("llama")),
        gguf_kv("tokenizer.ggml.tokens", 9, arr_tokens),
        gguf_kv("tokenizer.ggml.scores", 9, scores),
        gguf_kv("tokenizer.ggml.token_type", 9, types),
        gguf_kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)),
        gguf_kv("general.alignment", 4, struct.pack("<I", 32)),
    ]
    f32 = struct.pack("<8f", *[0.5] * 8)
    tensors = [("token_embd.weight", [8, 7], 0, f32 * 7),
               ("output_norm.weight", [8], 0, f32)]
    write("gguf", "llama_with_vocab.gguf", gguf_file(kvs, tensors))
    write("gguf", "metadata_only.gguf", gguf_file(kvs[:3], []))
    write("gguf", "empty.gguf", gguf_file([], []))


# ---- safetensors: u64 header length, JSON header, data ----
def safetensors(header, data):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    write("safetensors", "two_tensors.safetensors", safetensors(
        {"__metadata__": {"format": "pt"},
         "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
         "b": {"dtype": "BF16", "shape": [4], "data_offsets": [16, 24]}},
        b"\0" * 24))
    write("safetensors", "f16_scalar.safetensors", safetensors(
        {"x": {"dtype": "F16", "shape": [], "data_offsets": [0, 2]}},
        b"\0\x3c"))


# ---- llama2.c: checkpoint header (7 int32) + weights; tokenizer.bin ----
def llama2c_seeds():
    dim, hidden, layers, heads, kv_heads, vocab, seq = 8, 16, 1, 2, 2, 7, 32
    header = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab,
                         seq)
    write("llama2c", "checkpoint_header.bin", header + b"\0" * 64)
    write("llama2c", "negative_vocab.bin",
          struct.pack("<7i", dim, hidden, layers, heads, kv_heads, -vocab,
                      seq))
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n", b" ", b"a", b"b", b"ab"]
    tok = struct.pack("<i", max(len(p) for p in pieces))
    for i, p in enumerate(pieces):
        tok += struct.pack("<fi", -float(i), len(p)) + p
    write("llama2c", "tokenizer.bin", tok)


# ---- tokenizer: even first byte = tokenizer.json, odd = text ----
def tokenizer_seeds():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "ab": 5,
             "\u0120": 6, "\u0120a": 7}
    bpe = {"model": {"type": "BPE", "vocab": vocab,
                     "merges": ["a b", "\u0120 a"]},
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
           "decoder": {"type": "ByteLevel"},
           "added_tokens": [{"id": 0, "content": "<unk>", "special": True},
                            {"id": 1, "content": "<s>", "special": True}]}
    write("tokenizer", "bytelevel_bpe.json", b"\0" + json.dumps(bpe).encode())
    for i, text in enumerate([
            "Hello world, 123!", "caf\u00e9 na\u00efve \u2581 \u00e9\u0301",
            "<|im_start|>user\nhi<|im_end|>", "\u4f60\u597d\u4e16\u754c \U0001f600",
            "  \t\n\r\n   multiple   spaces ", "don't I'll we've 1234567"]):
        write("tokenizer", f"text_{i}.txt", b"\x01" + text.encode())
    write("tokenizer", "invalid_utf8.txt", b"\x01ab\xff\xfe\xc3")


# ---- jinja: the chat templates under tests/data/chat, and snippets ----
def jinja_seeds():
    for path in sorted(CHAT.glob("*.jinja")):
        write("jinja", path.name, path.read_bytes())
    snippets = {
        "loop_filters.jinja": "{% for m in messages %}{{ m.role | upper }}:"
                              "{{ m.content | trim }}{% if not loop.last %}|"
                              "{% endif %}{% endfor %}",
        "namespace.jinja": "{% set ns = namespace(n=0) %}{% for m in messages"
                           " %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
        # Regression (LeakSanitizer): a namespace that holds itself leaked.
        "namespace_holds_itself.jinja": "{% set ns = namespace(a=1) %}"
                                        "{% set ns.me = ns %}{{ ns.me.a }}",
        "macro_recursion.jinja": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}"
                                 "{% endif %}{{ n }}{% endmacro %}{{ f(5) }}",
        "tojson_tools.jinja": "{{ tools | tojson(indent=2) }}"
                              "{{ messages[2].tool_calls[0].function.arguments"
                              " | tojson }}",
        "strings.jinja": "{{ 'a,b,c'.split(',') | join('-') }}{{ '%05d' % 42 }}"
                         "{{ bos_token ~ eos_token }}{{ 'x' * 3 }}",
    }
    for name, text in snippets.items():
        write("jinja", name, text)


# ---- request: GenerateRequest wire bytes ----
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 5:
        return key + struct.pack("<f", payload)
    if isinstance(payload, str):
        payload = payload.encode()
    return key + varint(len(payload)) + payload


def message(role, content):
    return field(1, 2, role) + field(2, 2, content)


def request_seeds():
    chat = (field(2, 2, message("system", "Be brief.")) +
            field(2, 2, message("user", "What is the capital of France?")) +
            field(5, 0, 32))
    write("request", "chat.bin", chat)
    sampling = field(1, 5, 0.7) + field(2, 5, 0.9) + field(3, 0, 40)
    write("request", "prompt_sampling.bin",
          field(3, 2, "Once upon a time") + field(4, 2, sampling) +
          field(5, 0, 16) + field(6, 2, "\n\n") + field(9, 0, 1))
    regex = field(10, 2, field(3, 2, "[a-z]{3,8}"))  # sampling.constraint
    write("request", "chat_regex.bin",
          field(2, 2, message("user", "a word")) + field(4, 2, regex) +
          field(5, 0, 8))
    write("request", "prompt_ids.bin",
          b"".join(field(15, 0, i) for i in (1, 2, 3, 151643)) +
          field(5, 0, 4))
    write("request", "bad_top_p.bin",
          field(3, 2, "x") + field(4, 2, field(2, 5, 1.5)))


# ---- step: spans as fuzz_step.cc decodes them ----
def span(start, tokens, pages):
    return (struct.pack("<q", start) + bytes([len(tokens)]) +
            b"".join(struct.pack("<i", t) for t in tokens) +
            bytes([len(pages)]) + b"".join(struct.pack("<i", p) for p in pages))


def step_seeds():
    write("step", "two_spans.bin",
          bytes([2]) + span(0, [1, 2, 3], [0]) + span(16, [4], [1, 2]))
    write("step", "out_of_vocab.bin", bytes([1]) + span(0, [600], [0]))
    write("step", "page_outside.bin", bytes([1]) + span(0, [1], [99]))
    # Regression (UBSan): start_pos + size overflowed int64.
    write("step", "start_pos_overflow",
          bytes([1]) + span(2**63 - 2, [1, 2, 3], []))


if __name__ == "__main__":
    gguf_seeds()
    safetensors_seeds()
    llama2c_seeds()
    tokenizer_seeds()
    jinja_seeds()
    request_seeds()
    step_seeds()
    total = sum(1 for _ in CORPUS.rglob("*") if _.is_file())
    print(f"{total} seed files under {CORPUS}")
