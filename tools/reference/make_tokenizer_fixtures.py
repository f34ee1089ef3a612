#!/usr/bin/env python3
"""Writes the tokenizer test fixtures in tests/data/tokenizer/ from the reference libraries.

References: Hugging Face `tokenizers` (ids and decoded text), `sentencepiece` (ids of the
SentencePiece-BPE model) and `transformers` (its SentencePiece -> tokenizer.json conversion).

Outputs (all small; the 49K SmolLM2 vocabulary is never written out):
  corpus.json                  the test texts
  smollm2_<variant>.json       for byte-level variants over the SmolLM2 GGUF vocabulary (smollm,
                               gpt2, llama3, qwen2): the GGUF pre-tokenizer name, a tokenizer.json
                               skeleton (model.vocab and model.merges left empty: the C++ test
                               fills them from the GGUF) and the expected ids / decoded text
  bytelevel_flags.tokenizer.json / .expected.json
                               a small trained byte-level BPE with added tokens using lstrip,
                               rstrip, single_word and normalized, NFKC, Digits, Split, and a
                               TemplateProcessing post-processor
  spm_legacy.tokenizer.json, spm_metaspace.tokenizer.json, spm_gguf_metadata.json,
  spm.expected.json
                               a SentencePiece BPE model (byte_fallback, vocab 2000) trained on text
                               this script generates, converted by transformers (LlamaTokenizer
                               from tokenizer.model: Metaspace form, and the same with Llama-2's
                               legacy Prepend/Replace normalizer), and its GGUF tokenizer keys
                               (tokens, scores, token types) for an in-memory GGUF
  pre_tokenizers.json          pieces of single pre-tokenizers (Split behaviors, Digits, ...)
  chat_templates.json          prompts rendered by transformers' apply_chat_template

Usage: python3 tools/reference/make_tokenizer_fixtures.py [--model GGUF] [--out DIR] [--stress N]
Deterministic: running it again rewrites the same bytes.
"""

import argparse
import json
import os
import random
import shutil
import tempfile

import gguf
import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus():
    """Test texts: scripts, emoji, NFC/NFD pairs, code, whitespace, digits, contractions, and
    special tokens inside text."""
    texts = [
        "",
        "Hello world",
        "Hello, world! How are you doing today?",
        "The quick brown fox jumps over the lazy dog.",
        # contractions in various cases
        "I'm sure you're right: he's here, we've seen it, they'll come, I'd go.",
        "DON'T SHOUT, It'S fine, you'RE ok, WE'VE, THEY'LL, I'D, she'S, 'tis O'Neil's",
        "can't won't shouldn't y'all rock'n'roll ''quoted'' '90s",
        # digits and numbers
        "12345",
        "3.14159 and 2.71828",
        "1,000,000 dollars, 1000000 cents, 007, 0.5%",
        "Phone: +1 (555) 123-4567, ext. 89",
        "123456789012345678901234567890",
        "2024-01-15T10:30:00Z",
        "Arabic-Indic ٣٤٥ ١٢ and Devanagari ४२ digits",
        "Fractions ½ ¾, circled ①②③, roman Ⅻ Ⅳ, superscript x² y³",
        "v1.2.3-rc4 abc123def 4x4 3D 1st 2nd 3rd",
        # whitespace
        "  leading spaces",
        "trailing spaces   ",
        "multiple    spaces   between   words",
        "\t\ttabs\tand\t\tmore tabs\t",
        "line1\nline2\n\n\nline5\n",
        "windows\r\nline\r\n\r\nend",
        " \n \n ",
        "   ",
        "\n",
        "\n\n\n\n",
        " ",
        "a\u00a0b non-breaking\u00a0space",
        "x\u3000y ideographic space",
        "line\u2028separator and para\u2029graph",
        "next\u0085line",
        "mongolian\u180evowel",
        "zero\u200bwidth\u200cjoiners\u200d",
        "\ufeffbyte order mark",
        # code
        "def foo(x):\n    return x * 2\n\n\nclass Bar:\n\tpass\n",
        "for (int i = 0; i < n; ++i) {\n  sum += a[i];\n}\n",
        "if (a && b || !c) { x->y = z; } // comment\n    /* block */",
        "<div class=\"x\">&amp; &lt;tag&gt;</div>",
        '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
        "https://example.com/path?q=1&r=2#frag user@example.org",
        "x = [i**2 for i in range(10) if i % 2 == 0]  # squares",
        "    indented four\n        indented eight\n\t\tindented tabs",
        # unicode scripts and emoji
        "我爱自然语言处理。今天天气很好！",
        "こんにちは、世界。カタカナとひらがな",
        "안녕하세요 세계",
        "مرحبا بالعالم",
        "नमस्ते दुनिया",
        "Привет, мир! Ёлка и ёж.",
        "Γειά σου Κόσμε",
        "สวัสดีชาวโลก",
        "👋🌍 🎉🎉🎉 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 👍🏽",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𐍈",
        # accents: NFC and NFD forms of the same words
        "café naïve résumé Zürich São Paulo",
        "cafe\u0301 nai\u0308ve re\u0301sume\u0301 Zu\u0308rich Sa\u0303o Paulo",
        "\u00c5ngstr\u00f6m vs A\u030angstro\u0308m, \u00f1 vs n\u0303",
        "ﬁ ligature, Ｆｕｌｌｗｉｄｔｈ, ㈱, ℌ",
        # odd characters
        "control\x01\x02chars and\x00nul",
        "!!!??? ... ---- ==== **** ____ ~~~~",
        "Supercalifragilisticexpialidocious antidisestablishmentarianism",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "HELLO World hELLo WoRlD",
        # special tokens inside text (SmolLM2 / ChatML, SentencePiece, and the flags tokenizer)
        "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n",
        "text<|endoftext|>more text",
        "<|im_start|><|im_end|><|endoftext|>",
        "partial <|im_sta rt|> and <|im_end and |im_end|>",
        "<repo_name>foo/bar<file_sep>main.py<filename>x",
        " <|im_start|> spaced  <|im_end|>  ",
        "<|endoftext|>",
        "<s>Hello</s> <unk> world</s>",
        "<s> spaced </s>",
        "one <mask> two<mask>three   <mask>",
        "a <sep>   b<sep>c",
        "[WORD] x[WORD] [WORD]y ([WORD]) word[WORD]word",
        "fix ﬁx ﬁxed @@ a@@b",
        "<bos>start and end<eos>",
    ]
    paragraph = (
        "In the beginning, the tokenizer split text into pieces. Each piece was then merged, "
        "pair by pair, until no merge remained. The results were compared, id by id, with the "
        "reference; any difference was a bug. Numbers like 42, 1337 and 3.14 were split digit "
        "by digit, while words such as \"tokenization\" became two or three tokens.\n\n"
    )
    texts.append(paragraph * 3)
    return texts + stress_texts(STRESS_COUNT)


STRESS_COUNT = 160  # --stress changes it for one-off larger comparisons (not committed)


def stress_texts(n, seed=7):
    """Random mixes of the character classes the split regexes care about."""
    rng = random.Random(seed)
    pools = [
        "abcxyzABCXYZ", "'", "'sStTmMdD", "0123456789", "٣४½Ⅻ①", " ", "  ", "\t", "\n", "\r\n",
        "\u00a0\u3000\u2028\u0085\u180e\u200b", ".,;:!?-_()[]{}<>/\\\"@#$%^&*+=|~`",
        "éüñçÅøß", "e\u0301a\u0308", "中文字符日本語한국어", "👋🎉❤️👍🏽",
        "\u0301\u0308\u200d", "ЁёЖжΩω", "<|im_start|>", "<|im_end|>", "<mask>", "<sep>", "[WORD]",
        "<s>", "</s>", "ﬁ", "@@",
    ]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            pool = rng.choice(pools)
            if len(pool) > 1 and not pool.startswith("<") and not pool.startswith("["):
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 4))))
            else:
                parts.append(pool)
        out.append("".join(parts))
    return out


def pre_tokenizer_cases():
    """Splits of a few texts by single pre-tokenizers, as Hugging Face computes them."""
    texts = ["How are  you doing?", "  a1b22c333  ", "x\u2581y z\u2581\u2581w ", "no-match",
             "ab..cd...ef", "", "\u2581lead", "3.14-15 \u0663\u00bd"]
    specs = []
    for behavior in ("removed", "isolated", "merged_with_previous", "merged_with_next",
                     "contiguous"):
        for invert in (False, True):
            for pattern in (" ", Regex(r"\s+"), Regex(r"\d"), Regex(r"\.+")):
                specs.append(pre_tokenizers.Split(pattern, behavior=behavior, invert=invert))
    specs += [pre_tokenizers.Digits(individual_digits=True),
              pre_tokenizers.Digits(individual_digits=False)]
    for scheme in ("always", "first", "never"):
        for split in (True, False):
            specs.append(pre_tokenizers.Metaspace(prepend_scheme=scheme, split=split))
    specs += [pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
              pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    cases = []
    for spec in specs:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = spec
        pre = json.loads(tok.to_str())["pre_tokenizer"]
        cases.append({"pre_tokenizer": pre,
                      "pieces": [[p for p, _ in spec.pre_tokenize_str(t)] for t in texts]})
    return {"texts": texts, "cases": cases}


def smollm2_vocab(model_path):
    reader = gguf.GGUFReader(model_path)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    merges = reader.fields["tokenizer.ggml.merges"].contents()
    return tokens, types, merges


def byte_level_variant(tokens, types, merges, variant):
    """The HF tokenizer over the GGUF vocabulary with the pre-tokenizer of `variant`."""
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=(variant == "llama3")))
    if variant == "smollm":
        # SmolLM2's official tokenizer.json.
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
    elif variant == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif variant in ("llama3", "qwen2"):
        pattern = LLAMA3_PATTERN if variant == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        if variant == "qwen2":
            tok.normalizer = normalizers.NFC()
    else:
        raise ValueError(variant)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # Control tokens (type 3) are the special added tokens, as in SmolLM2's tokenizer.json.
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    return tok


def encode(tok, text, parse_special, add_special_tokens=False):
    tok.encode_special_tokens = not parse_special
    return tok.encode(text, add_special_tokens=add_special_tokens).ids


def expectations(tok, texts):
    out = {"ids": [], "ids_plain": [], "decoded": [], "decoded_skip": []}
    for t in texts:
        ids = encode(tok, t, True)
        out["ids"].append(ids)
        out["ids_plain"].append(encode(tok, t, False))
        out["decoded"].append(tok.decode(ids, skip_special_tokens=False))
        out["decoded_skip"].append(tok.decode(ids, skip_special_tokens=True))
    return out


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    size = os.path.getsize(path)
    if STRESS_COUNT == 160:
        assert size < 500_000, f"{path} is {size} bytes"
    print(f"wrote {os.path.relpath(path, REPO)} ({size} bytes)")


def make_smollm2(model_path, texts, out_dir):
    tokens, types, merges = smollm2_vocab(model_path)
    for variant in ("smollm", "gpt2", "llama3", "qwen2"):
        tok = byte_level_variant(tokens, types, merges, variant)
        skeleton = json.loads(tok.to_str())
        skeleton["model"]["vocab"] = {}
        skeleton["model"]["merges"] = []
        data = {"gguf_pre": variant, "tokenizer_json": skeleton}
        data.update(expectations(tok, texts))
        write_json(os.path.join(out_dir, f"smollm2_{variant}.json"), data)


def generated_text(seed, n_lines):
    """English-like training text: real function words and made-up syllable words, Zipf-ish."""
    rng = random.Random(seed)
    base = ("the of and to in is was that for it with as he on be at by this had not are but "
            "from or have an they which one you were her all she there would their we him been "
            "has when who will more no if out so said what up its about into than them can only "
            "other new some could time these two may then do first any my now such like our over "
            "man me even most made after also did many before must through back years where much "
            "your way well down should because each just those people how too little state good "
            "very make world still own see men work long get here between both life being under "
            "never day same another know while last might us great old year off come since "
            "against go came right used take three hello token text model").split()
    onsets = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
              "w", "st", "tr", "ch", "sh", "th", "pl", "gr", "br"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "y"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck"]
    made_up = set()
    while len(made_up) < 4000:
        w = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(1, 3)))
        made_up.add(w + rng.choice(codas))
    words = base + sorted(made_up)
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(words))]
    lines = []
    for _ in range(n_lines):
        s = " ".join(rng.choices(words, weights, k=rng.randint(4, 18)))
        if rng.random() < 0.3:
            s = s.capitalize()
        s += rng.choice([".", ",", "!", "?", ";", ":", ""])
        if rng.random() < 0.2:
            s += " " + str(rng.randint(0, 100000))
        if rng.random() < 0.1:
            s = "    " + s
        lines.append(s)
    lines += ["café naïve résumé Zürich São Paulo", "Привет мир, ёлка"] * 5
    return "\n".join(lines)


def make_bytelevel_flags(texts, out_dir, work):
    train_path = os.path.join(work, "bl_train.txt")
    with open(train_path, "w", encoding="utf-8") as f:
        f.write(generated_text(1, 4000))
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split("-", behavior="removed"),
        pre_tokenizers.Split(Regex(r"\.+"), behavior="merged_with_previous"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<bos>", "<eos>"])
    tok.train([train_path], trainer)
    tok.add_special_tokens([
        AddedToken("<mask>", lstrip=True, special=True, normalized=False),
        AddedToken("<sep>", rstrip=True, special=True, normalized=False),
    ])
    tok.add_tokens([
        AddedToken("[WORD]", single_word=True, normalized=False),
        AddedToken("\ufb01x", normalized=True),  # "ﬁx": matched after NFKC as "fix"
        AddedToken("@@", normalized=False),
    ])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", special_tokens=[("<bos>", tok.token_to_id("<bos>")),
                                                 ("<eos>", tok.token_to_id("<eos>"))])
    path = os.path.join(out_dir, "bytelevel_flags.tokenizer.json")
    tok.save(path)
    print(f"wrote {os.path.relpath(path, REPO)} ({os.path.getsize(path)} bytes)")
    data = expectations(tok, texts)
    data["ids_with_bos"] = [encode(tok, t, True, add_special_tokens=True) for t in texts]
    write_json(os.path.join(out_dir, "bytelevel_flags.expected.json"), data)


def spm_gguf_metadata(sp):
    """The tokenizer.ggml.* keys a GGUF converter writes for this SentencePiece model (the C++
    test serializes them into an in-memory GGUF; *.gguf files are not committed)."""
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(int(gguf.TokenType.UNKNOWN))
        elif sp.is_control(i):
            types.append(int(gguf.TokenType.CONTROL))
        elif sp.is_byte(i):
            types.append(int(gguf.TokenType.BYTE))
        elif sp.is_unused(i):
            types.append(int(gguf.TokenType.UNUSED))
        else:
            types.append(int(gguf.TokenType.NORMAL))
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": sp.bos_id(),
        "tokenizer.ggml.eos_token_id": sp.eos_id(),
        "tokenizer.ggml.unknown_token_id": sp.unk_id(),
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
    }


def make_spm(texts, out_dir, work):
    from transformers import LlamaTokenizer

    train_path = os.path.join(work, "spm_train.txt")
    with open(train_path, "w", encoding="utf-8") as f:
        f.write(generated_text(0, 20000))
    prefix = os.path.join(work, "spm")
    # Llama-2's settings: identity normalization, spaces kept, digits split, byte fallback.
    spm.SentencePieceTrainer.train(
        input=train_path, model_prefix=prefix, model_type="bpe", vocab_size=2000,
        byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        split_digits=True, allow_whitespace_only_pieces=True, character_coverage=1.0,
        num_threads=1, minloglevel=2)
    model_file = prefix + ".model"
    sp = spm.SentencePieceProcessor(model_file=model_file)
    data = {"sp_ids": [sp.encode(t) for t in texts],
            "sp_ids_with_bos": [sp.encode(t, add_bos=True) for t in texts]}
    # transformers converts the SentencePiece model (vocab, merges ranked by score) into a
    # LlamaTokenizer; legacy=False gives its default form, Metaspace(prepend_scheme="first").
    hf_dir = os.path.join(work, "hf")
    os.makedirs(hf_dir)
    shutil.copy(model_file, os.path.join(hf_dir, "tokenizer.model"))
    converted = LlamaTokenizer.from_pretrained(hf_dir, legacy=False).backend_tokenizer
    for name in ("legacy", "metaspace"):
        tok = Tokenizer.from_str(converted.to_str())
        if name == "legacy":
            # Llama-2's tokenizer.json form: Prepend + Replace normalizer, no pre-tokenizer.
            tok.normalizer = normalizers.Sequence(
                [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
            tok.pre_tokenizer = None
        # Llama-2's post-processor: "<s> $A".
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", sp.bos_id())])
        path = os.path.join(out_dir, f"spm_{name}.tokenizer.json")
        tok.save(path)
        print(f"wrote {os.path.relpath(path, REPO)} ({os.path.getsize(path)} bytes)")
        exp = expectations(tok, texts)
        exp["ids_with_bos"] = [encode(tok, t, True, add_special_tokens=True) for t in texts]
        data[name] = exp
    write_json(os.path.join(out_dir, "spm.expected.json"), data)
    write_json(os.path.join(out_dir, "spm_gguf_metadata.json"), spm_gguf_metadata(sp))


# Chat templates written for the fixture. Llama-3 (8B-Instruct), Llama-2-chat and Mistral-7B-
# Instruct-v0.1 are the published templates as we know them; the Qwen2.5 one keeps only the
# no-tools part of the published template (its tool-calling branches are left out).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
    "<|end_header_id|>\n\n' }}{% endif %}")
LLAMA31_TEMPLATE = (
    "{{- bos_token }}\n"
    "{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n"
    "{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n"
    "{%- endif %}\n"
    "{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n{%- endif %}\n"
    "{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n"
    "    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n"
    "{%- endif %}\n\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if builtin_tools is defined or tools is not none %}\n"
    "    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n"
    "{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{{- system_message }}\n{{- \"<|eot_id|>\" }}\n\n"
    "{%- for message in messages %}\n"
    "    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n"
    "    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n")
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
    "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}"
    "{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == "
    "'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
    "roles are supported!') }}{% endif %}{% endfor %}")
QWEN25_TEMPLATE = """{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant") %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


def chat_conversations():
    def m(role, content):
        return {"role": role, "content": content}
    return [
        [],
        [m("user", "Hello!")],
        [m("system", "You are terse."), m("user", "What is 2+2?")],
        [m("user", "Hi"), m("assistant", "Hello! How can I help?"), m("user", "Tell me a joke.")],
        [m("system", "  Be kind.  \n"), m("user", "  padded question \n\n"),
         m("assistant", "\n  padded answer  "), m("user", "again\t")],
        [m("user", "Write code:\n```py\nprint('hi')\n```"), m("assistant", "Done.")],
        [m("user", "unicode: 你好, café, 👋"), m("assistant", "ok"), m("user", "")],
        [m("system", ""), m("user", "empty system")],
        [m("user", "a"), m("system", "late system"), m("user", "b")],
        [m("assistant", "I speak first"), m("user", "then me")],
        [m("user", "one"), m("user", "two")],
    ]


def make_chat_templates(model_path, out_dir):
    from transformers import PreTrainedTokenizerFast

    reader = gguf.GGUFReader(model_path)
    smollm2 = reader.fields["tokenizer.chat_template"].contents()
    templates = [
        ("smollm2", smollm2, "<|im_start|>", "<|im_end|>"),
        ("qwen2.5", QWEN25_TEMPLATE, "", "<|im_end|>"),
        ("llama3", LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>"),
        # The tool-free core of Llama 3.1's template (written from its published structure;
        # the tool-calling branches are left out).
        ("llama3.1", LLAMA31_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>"),
        ("llama2", LLAMA2_TEMPLATE, "<s>", "</s>"),
        ("mistral", MISTRAL_TEMPLATE, "<s>", "</s>"),
    ]
    base = Tokenizer(models.BPE())
    conversations = chat_conversations()
    cases = []
    for name, template, bos, eos in templates:
        tok = PreTrainedTokenizerFast(tokenizer_object=base, bos_token=bos or None, eos_token=eos)
        rendered = []
        for conv in conversations:
            for gen in (False, True):
                try:
                    text = tok.apply_chat_template(conv, chat_template=template, tokenize=False,
                                                   add_generation_prompt=gen)
                    rendered.append({"prompt": text})
                except Exception as e:  # the template raised (roles not alternating, ...)
                    rendered.append({"error": type(e).__name__ + ": " + str(e)})
        cases.append({"name": name, "template": template, "bos": bos, "eos": eos,
                      "rendered": rendered})
    write_json(os.path.join(out_dir, "chat_templates.json"),
               {"conversations": conversations, "templates": cases})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(REPO, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests/data/tokenizer"))
    ap.add_argument("--stress", type=int, default=160,
                    help="number of random stress texts (keep the default for committed files)")
    args = ap.parse_args()
    global STRESS_COUNT
    STRESS_COUNT = args.stress
    os.makedirs(args.out, exist_ok=True)
    texts = corpus()
    write_json(os.path.join(args.out, "corpus.json"), {"texts": texts})
    write_json(os.path.join(args.out, "pre_tokenizers.json"), pre_tokenizer_cases())
    make_smollm2(args.model, texts, args.out)
    make_chat_templates(args.model, args.out)
    with tempfile.TemporaryDirectory() as work:
        make_bytelevel_flags(texts, args.out, work)
        make_spm(texts, args.out, work)


if __name__ == "__main__":
    main()
