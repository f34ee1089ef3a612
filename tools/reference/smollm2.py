"""SmolLM2-135M-Instruct from its GGUF: the model through transformers, and the faithful tokenizer.

transformers' own GGUF tokenizer conversion builds the pre-tokenizer as a bare ByteLevel (regex on);
SmolLM2's official tokenizer.json has Sequence[Digits(individual_digits=True), ByteLevel(...)].
The two differ on some inputs (for example runs of spaces before a digit), so the reference
tokenizer here is rebuilt the official way from the GGUF vocabulary and merges.
"""

from __future__ import annotations

import gguf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers import AddedToken


def _field(reader: gguf.GGUFReader, key: str):
    return reader.fields[key].contents()


def faithful_tokenizer(gguf_path: str):
    """A PreTrainedTokenizerFast equal to SmolLM2-135M-Instruct's official tokenizer."""
    from transformers import PreTrainedTokenizerFast

    r = gguf.GGUFReader(gguf_path)
    assert _field(r, "tokenizer.ggml.model") == "gpt2"
    assert _field(r, "tokenizer.ggml.pre") == "smollm"
    tokens = _field(r, "tokenizer.ggml.tokens")
    types = _field(r, "tokenizer.ggml.token_type")
    merges = _field(r, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], dropout=None,
                     unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                     fuse_unk=False, byte_fallback=False, ignore_merges=False)
    tok = Tokenizer(bpe)
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False,
                                              use_regex=True)
    control = [AddedToken(tokens[i], special=True, normalized=False)
               for i, ty in enumerate(types) if ty == 3]  # CONTROL
    tok.add_special_tokens(control)
    bos = tokens[_field(r, "tokenizer.ggml.bos_token_id")]
    eos = tokens[_field(r, "tokenizer.ggml.eos_token_id")]
    unk = tokens[_field(r, "tokenizer.ggml.unknown_token_id")]
    pad = tokens[_field(r, "tokenizer.ggml.padding_token_id")]
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos,
                                 unk_token=unk, pad_token=pad, clean_up_tokenization_spaces=False)
    hf.chat_template = _field(r, "tokenizer.chat_template")
    return hf, tok


def load_model(gguf_path: str):
    import os

    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(gguf_path)), gguf_file=os.path.basename(gguf_path),
        dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    return model


def gguf_auto_tokenizer(gguf_path: str):
    """transformers' own conversion of the GGUF tokenizer (for the comparison only)."""
    import os

    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(gguf_path)),
                                         gguf_file=os.path.basename(gguf_path))
