#!/usr/bin/env python3
"""Generates tests/data/tokenizer/qwen35_reference.json (Qwen3.5 pre-tokenizer).

Qwen3.5's tokenizer.json is Qwen3's with two changes: the Split regex of
the pre-tokenizer lets combining marks join letter runs ([\\p{L}\\p{M}]+
where Qwen2/3 has \\p{L}+) and leave punctuation runs
([^\\s\\p{L}\\p{M}\\p{N}] where Qwen2/3 has [^\\s\\p{L}\\p{N}]);
llama.cpp names it "qwen35"; and it has no NFC normaliser (llama.cpp's
ggml-vocab-qwen35 vectors, made from the real tokenizer, keep "e" + U+0301
as two tokens). This script takes Qwen3's tokenizer.json, swaps that regex
in and drops the normaliser, and records what the PyPI `tokenizers`
package (the reference) makes of strings rich in marks:

    python3 -m venv V && V/bin/pip install tokenizers
    V/bin/python tests/tools/make_qwen35_tokenizer_vectors.py [--shared ../shared]

Output (committed; CI never runs this script):
  {"regex": the Qwen3.5 Split regex (as tokenizer.json spells it),
   "qwen2_regex": the regex it replaced,
   "cases": [{"text", "ids" (Qwen3.5, no special tokens added, no NFC),
              "qwen2_ids" (the unmodified Qwen3 tokenizer.json),
              "pieces" (the Split alone on the raw text)}]}
"""
import argparse
import json
import os
import random

from tokenizers import Regex, Tokenizer
from tokenizers.pre_tokenizers import Split

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, '..', 'data', 'tokenizer', 'qwen35_reference.json')

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|"
                r"\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TEXTS = [
    # Ordinary English and code (same pieces as Qwen2).
    "Hello world",
    " Hello, World! It's 2024; we'RE here, y'all.",
    "int main() {\n  return printf(\"%d\\n\", x[42] >= 0x1F);\n}\n",
    "def f(a, b):\n\treturn a**2 + b  # comment\n\n",
    # Devanagari: viramas, matras (Mn and Mc), nukta, anusvara.
    "नमस्ते दुनिया",
    "हिन्दी में लिखा गया पाठ। क्या आप पढ़ सकते हैं?",
    "संस्कृतम् श्लोकः ॥१॥",
    "(क्षत्रिय) \"ज्ञान\" —प्रश्न!",
    # Thai: above/below vowel signs and tone marks (Mn).
    "สวัสดีครับ ภาษาไทย",
    "ผู้ใหญ่ น้ำแข็ง ที่นี่",
    "\"กิ๊ก\"...ก็ได้!",
    # Vietnamese with combining accents (NFC composes some, not all).
    "Tie\u0302\u0301ng Vie\u0323\u0302t co\u0301 da\u0302\u0301u",
    "Vi\u1ec7t Nam \u0111\u1eb9p l\u1eafm",
    "x\u0303 q\u0307 n\u0304g m\u0300 \u0301a ,\u0301b",
    "(\u0301) '\u0308s 'S\u0301",
    # Hebrew with points and cantillation.
    "\u05d1\u05b0\u05bc\u05e8\u05b5\u05d0\u05e9\u05b4\u05c1\u05d9\u05ea "
    "\u05d1\u05b8\u05bc\u05e8\u05b8\u05d0",
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd, \u05e2\u05d5\u05b9\u05dc\u05b8\u05dd!",
    # Emoji with variation selectors, keycaps, skin tones, ZWJ.
    "I \u2764\ufe0f it \u263a\ufe0f\u263a\ufe0f",
    "keycap 1\ufe0f\u20e3 #\ufe0f\u20e3 *\u20e3",
    "\u2714\ufe0f done \u2728\u2728 \U0001f44d\U0001f3fd",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f3f3\ufe0f\u200d\U0001f308",
    "\u00a9\ufe0f \u2122\ufe0f \u2190\ufe0e\u2192\ufe0f",
    # Marks after spaces, digits, punctuation and line breaks.
    " \u0301\u0302 a",
    "12\u0301 3\u0308",
    "!!\u0301?? ..\u0323.",
    "\n\u0301\n \u0300\r\n",
    "a\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308",
    "\u0915\u094d\u200d\u0937 \u0915\u093c",
    # Other scripts with marks.
    "\u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629 "
    "\u0645\u064f\u062d\u064e\u0645\u064e\u0651\u062f",
    "বাংলা ভাষা தமிழ் ಕನ್ನಡ",
    "\u1000\u103c\u102d\u102f\u1000\u103a \u178f\u17d2\u179a\u17b8",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324"
    "\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334",
    "Ελληνικά Русский 漢字 かな、カナ。",
]

# Characters the random strings draw from: marks of several kinds (Mn, Mc,
# Me, variation selectors), letters, digits, punctuation, symbols, spaces.
ALPHABET = (list("aZé'sd ,.!?-_()1\n\r\t ") +
            ['\u0301', '\u0308', '\u0323', '\u093e', '\u094d', '\u0e31',
             '\u0e48', '\u05b0', '\u05bc', '\u064e', '\ufe0f', '\u20e3',
             '\u0903', '\u0915', '\u0e01', '\u05d1', '\u0627', '\u2764',
             '\u263a', '\u00a0', '\u3000', '\u0661', '\u00bd', '\U0001f44d',
             '\u200d', '\u0345', '\u1dc0'])


def random_texts(n, seed):
    rng = random.Random(seed)
    return [''.join(rng.choice(ALPHABET) for _ in range(rng.randint(4, 24)))
            for _ in range(n)]


def load(path, regex, nfc):
    doc = json.load(open(path, encoding='utf-8'))
    split = doc['pre_tokenizer']['pretokenizers'][0]
    assert split['type'] == 'Split', split
    assert split['pattern']['Regex'] == QWEN2_REGEX, split['pattern']
    assert doc['normalizer'] == {'type': 'NFC'}, doc['normalizer']
    split['pattern']['Regex'] = regex
    if not nfc:
        doc['normalizer'] = None
    return Tokenizer.from_str(json.dumps(doc))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--shared', default=os.path.join(HERE, '..', '..', '..', 'shared'))
    args = ap.parse_args()
    path = os.path.join(args.shared, 'tokenizers', 'qwen3', 'tokenizer.json')
    qwen35 = load(path, QWEN35_REGEX, nfc=False)
    qwen2 = load(path, QWEN2_REGEX, nfc=True)
    split = Split(Regex(QWEN35_REGEX), behavior='isolated', invert=False)
    cases = []
    for text in TEXTS + random_texts(24, seed=35):
        cases.append({
            'text': text,
            'ids': qwen35.encode(text, add_special_tokens=False).ids,
            'qwen2_ids': qwen2.encode(text, add_special_tokens=False).ids,
            'pieces': [p for p, _ in split.pre_tokenize_str(text)],
        })
    differ = sum(c['ids'] != c['qwen2_ids'] for c in cases)
    dump = lambda v: json.dumps(v, ensure_ascii=False)
    with open(OUT, 'w', encoding='utf-8') as f:  # one case a line
        f.write('{"regex": %s,\n"qwen2_regex": %s,\n"cases": [\n%s\n]}\n' % (
            dump(QWEN35_REGEX), dump(QWEN2_REGEX),
            ',\n'.join(dump(c) for c in cases)))
    print('%d cases, %d with ids other than Qwen2\'s -> %s' %
          (len(cases), differ, os.path.normpath(OUT)))


if __name__ == '__main__':
    main()
