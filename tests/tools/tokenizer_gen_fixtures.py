#!/usr/bin/env python3
"""Generates the tokenizer reference fixtures in tests/data/tokenizer/.

Reference environment (CPU only):
    python3 -m venv V && V/bin/pip install torch transformers gguf tokenizers sentencepiece
    V/bin/python tests/tools/tokenizer_gen_fixtures.py [--shared ../shared]

Writes (small JSON files, committed; CI never runs this script):
  qwen3_reference.json    ids from the PyPI `tokenizers` package on
                          shared/tokenizers/qwen3/tokenizer.json (NFC, Qwen2 regex)
  smollm2_reference.json  ids from transformers' GGUF import of the SmolLM2
                          vocabulary (~/.cache/pdserve/models/...Q4_1.gguf) with
                          SmolLM2's own pre-tokenizer (Digits individual_digits
                          + ByteLevel), as its tokenizer.json declares
  tok512_reference.json   ids from a transcription of llama2.c's encode()
                          (run.c: dummy " " prefix, per-character lookup with
                          byte fallback id = byte + 3, then repeatedly merge the
                          best-scoring adjacent pair, leftmost on ties)
  pretokenizer_reference.json  pieces from the `regex` package (which has
                          \p{L} / \p{N}) running each family's reference regex
                          on random mixed-script strings
  tok512_tokenizer.json   stories260K's vocabulary as a Hugging Face
                          SentencePiece-style tokenizer.json (Metaspace, BPE
                          with byte_fallback), made by transformers' GGUF
                          converter from a GGUF written with the gguf package
  hf_spm_reference.json   ids from the PyPI `tokenizers` on that file
  nfc_reference.json      unicodedata.normalize('NFC', s) of random strings
                          rich in combining marks, jamo, singletons, exclusions
Every ids case is {"text": ..., "ids": [...]} with no BOS.
"""
import argparse
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, '..', 'data', 'tokenizer')

TEXTS = [
    "",
    " ",
    "Hello world",
    " Hello, World! It's 2024; we'RE here, y'all. I'M sure THEY'LL go'd",
    "int main() {\n  return printf(\"%d\\n\", x[42] >= 0x1F);\n}\n",
    "def f(a, b):\n\treturn a**2 + b  # comment\n\n\n",
    "数字12345和汉字混合，标点。「引号」テスト、カタカナ와 한국어",
    "Café résumé naïve — Cafe\u0301 Ko\u0308ln A\u030a \u1100\u1161\u11a8 \u212b \ufb01",
    "emoji 🦙🚀👍🏽 👨‍👩‍👧 flags 🇩🇪",
    "tabs\tand  double  spaces   \n \n\r\n\u00a0nbsp\u3000ideographic\u2003em",
    "1 12 123 1234 12345 ١٢٣ ⅷ ½ 3.14159 -7e10",
    "Ελληνικά Русский עברית العربية हिन्दी ไทย",
    "<|im_start|>user\nhi<|im_end|> <think>x</think>",
    "trailing spaces   ",
    "\n\n\nleading newlines",
    "x" * 300 + " " + "🙂" * 40,
    "Once upon a time, there was a little girl named Lily. She liked to play.",
]


def random_texts(n, seed):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789", " \t\n\r", "'\".,;:!?()[]{}<>/\\|_-+=*&^%$#@~`",
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
        "あいうえおかきくけこアイウエオ", "абвгдежзийклмнопрст", "éèêëàâäôöûüç",
        "\u0301\u0308\u030a", "🦙🚀👍🏽😀🇩🇪", "\u00a0\u2003\u3000\u200b",
    ]
    out = []
    for _ in range(n):
        length = rng.randint(1, 60)
        out.append(''.join(rng.choice(rng.choice(pools)) for _ in range(length)))
    return out


def write(name, cases):
    path = os.path.join(OUT, name)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump({'cases': cases}, f, ensure_ascii=False, indent=0)
    print(path, len(cases))


def qwen3(shared):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(shared, 'tokenizers', 'qwen3', 'tokenizer.json'))
    texts = [t for t in TEXTS if '<|' not in t] + random_texts(40, 1)
    write('qwen3_reference.json',
          [{'text': t, 'ids': tok.encode(t, add_special_tokens=False).ids} for t in texts])


def smollm2(gguf_path):
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.dirname(gguf_path),
                                        gguf_file=os.path.basename(gguf_path))
    backend = tok.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    texts = [t for t in TEXTS if '<|' not in t] + random_texts(20, 2)
    write('smollm2_reference.json',
          [{'text': t, 'ids': backend.encode(t, add_special_tokens=False).ids}
           for t in texts])


def load_llama2c(path):
    data = open(path, 'rb').read()
    pos = 4
    vocab, scores = [], []
    while pos < len(data):
        score, length = struct.unpack_from('<fi', data, pos)
        pos += 8
        vocab.append(data[pos:pos + length])
        scores.append(score)
        pos += length
    return vocab, scores


def llama2c_encode(text, vocab, scores):
    index = {}
    for i, v in enumerate(vocab):
        index.setdefault(v, i)
    tokens = []
    if text:
        tokens.append(index.get(b' ', -1))
    for ch in text:
        b = ch.encode('utf-8')
        if b in index:
            tokens.append(index[b])
        else:
            tokens.extend(x + 3 for x in b)
    while True:
        best, best_id, best_idx = -1e10, -1, -1
        for i in range(len(tokens) - 1):
            j = index.get(vocab[tokens[i]] + vocab[tokens[i + 1]], -1)
            if j != -1 and scores[j] > best:
                best, best_id, best_idx = scores[j], j, i
        if best_idx == -1:
            break
        tokens[best_idx:best_idx + 2] = [best_id]
    return tokens


def tok512(shared):
    vocab, scores = load_llama2c(os.path.join(shared, 'models', 'stories260K', 'tok512.bin'))
    texts = [t for t in TEXTS if '<|' not in t and len(t) < 200] + random_texts(10, 3)
    write('tok512_reference.json',
          [{'text': t, 'ids': llama2c_encode(t, vocab, scores)} for t in texts])


PRE_REGEX = {
    'gpt-2': r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    'llama-bpe': r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    'qwen2': r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}


def pretokenizer():
    import regex
    rng = random.Random(4)
    pool = "aZé中ヅя٣5 \t\n\r\u00a0\u3000'sStTrReEvVmMlLdD.,!?\"-_#🦙\u0301"
    texts = [''.join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(60)]
    cases = []
    for kind, rx in PRE_REGEX.items():
        for t in texts:
            pieces = regex.findall(rx, t)
            assert ''.join(pieces) == t
            cases.append({'kind': kind, 'text': t, 'pieces': pieces})
    write('pretokenizer_reference.json', cases)


def nfc():
    import unicodedata
    rng = random.Random(5)
    pool = ("aeiouAEOUnNcCsSzZyY\u03b1\u03c9\u0391\u0435\u0418\u05d0\u0627\u0915"
            "\u0301\u0300\u0302\u0303\u0308\u030a\u0323\u0327\u0328\u0345\u05b4"
            "\u0654\u093c\u0f71\u0f72\u1100\u1161\u11a8\uac00\u212b\u2126"
            "\u0958\u0344\u1e9b\u00c5\u00e9\u1ea0\u0340\u0f73\u0cd5\u0cc6")
    cases = []
    for _ in range(200):
        t = ''.join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
        cases.append({'text': t, 'nfc': unicodedata.normalize('NFC', t)})
    write('nfc_reference.json', cases)


def tok512_hf(shared):
    import tempfile
    import gguf
    import numpy as np
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    vocab, scores = load_llama2c(os.path.join(shared, 'models', 'stories260K', 'tok512.bin'))
    tokens, types = [], []
    for t in vocab:
        if t == b'\n<s>\n':
            tokens.append('<s>'), types.append(3)
        elif t == b'\n</s>\n':
            tokens.append('</s>'), types.append(3)
        elif t == b'<unk>':
            tokens.append('<unk>'), types.append(2)
        elif t.startswith(b'<0x') and len(t) == 6:
            tokens.append(t.decode()), types.append(6)
        else:
            tokens.append(t.decode().replace(' ', '\u2581')), types.append(1)
    with tempfile.TemporaryDirectory() as tmp:
        w = gguf.GGUFWriter(os.path.join(tmp, 'tok512.gguf'), 'llama')
        w.add_tokenizer_model('llama')
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_block_count(1)
        w.add_context_length(512)
        w.add_embedding_length(64)
        w.add_head_count(8)
        w.add_feed_forward_length(172)
        w.add_tensor('token_embd.weight', np.zeros((512, 64), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        hf = AutoTokenizer.from_pretrained(tmp, gguf_file='tok512.gguf')
        path = os.path.join(OUT, 'tok512_tokenizer.json')
        hf.backend_tokenizer.save(path)
    print(path)
    tok = Tokenizer.from_file(path)
    texts = [t for t in TEXTS if len(t) < 200] + random_texts(10, 6) + [
        ' hello', '  hello', '<s>hello', 'a<s>hello', 'a</s> b', 'x<unk>y']
    write('hf_spm_reference.json',
          [{'text': t, 'ids': tok.encode(t, add_special_tokens=False).ids} for t in texts])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--shared', default=os.path.join(HERE, '..', '..', '..', 'shared'))
    ap.add_argument('--smollm2', default=os.path.join(
        os.environ.get('PDSERVE_CACHE', os.path.expanduser('~/.cache/pdserve')),
        'models', 'SmolLM2-135M-Instruct.Q4_1.gguf'))
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    pretokenizer()
    nfc()
    qwen3(args.shared)
    smollm2(args.smollm2)
    tok512(args.shared)
    tok512_hf(args.shared)


if __name__ == '__main__':
    main()
