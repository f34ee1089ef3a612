"""Trains the two tiny byte-level BPE tokenizers (1024 tokens) of the tiny models.

- tiny_tok_llama3: Llama-3 pre-tokenizer (Split on the Llama-3 regex, then ByteLevel without its
  own regex), ignore_merges as in Llama-3, BOS added by a TemplateProcessing post-processor,
  special tokens <|begin_of_text|>, <|end_of_text|>, <|start_header_id|>, <|end_header_id|>,
  <|eot_id|> appended after the trained vocabulary (as in Llama-3, where they follow the merges).
- tiny_tok_qwen2: NFC normalizer, Qwen2 regex (single digits), ByteLevel, no BOS; special tokens
  <|endoftext|>, <|im_start|>, <|im_end|> appended after the trained vocabulary.

Each is written as <name>.json (tokenizer.json) and <name>_config.json (its tokenizer_config.json:
bos/eos/pad tokens, add_bos_token, chat template). The tiny model writers (Python and C++) copy both.
"""

from __future__ import annotations

import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers

import texts

VOCAB_SIZE = 1024

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|eot_id|>"]
QWEN2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Llama-3 instruct style: BOS, then per message a header, blank line, trimmed content, <|eot_id|>.
LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{- message['content'] | trim }}"
    "{{- '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}")

# ChatML with a default system message, as Qwen2 instruct models do.
CHATML_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}")


def _train(tok: Tokenizer, n_special: int) -> None:
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - n_special, min_frequency=1,
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts.training_corpus(), trainer=trainer)


def build_llama3() -> tuple[Tokenizer, dict]:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    _train(tok, len(LLAMA3_SPECIAL))
    tok.add_special_tokens(LLAMA3_SPECIAL)
    bos_id = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos_id)]),
    ])
    tok.model.ignore_merges = True
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "pad_token": None,
        "unk_token": None,
        "chat_template": LLAMA3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return tok, config


def build_qwen2() -> tuple[Tokenizer, dict]:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    _train(tok, len(QWEN2_SPECIAL))
    tok.add_special_tokens(QWEN2_SPECIAL)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "chat_template": CHATML_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "model_max_length": 4096,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    return tok, config


BUILDERS = {"tiny_tok_llama3": build_llama3, "tiny_tok_qwen2": build_qwen2}


def paths(out_dir: str, name: str) -> tuple[str, str]:
    return os.path.join(out_dir, name + ".json"), os.path.join(out_dir, name + "_config.json")


def write_all(out_dir: str) -> None:
    for name, build in BUILDERS.items():
        tok, config = build()
        assert tok.get_vocab_size() == VOCAB_SIZE, (name, tok.get_vocab_size())
        tok_path, cfg_path = paths(out_dir, name)
        tok.save(tok_path, pretty=False)
        with open(cfg_path, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, ensure_ascii=False)
            f.write("\n")
