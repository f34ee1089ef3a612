#!/usr/bin/env python3
"""Correctness reference for IceCache: logits and greedy tokens from Hugging Face transformers.

Run from the repository root (CPU only, a few minutes):

    python3 tools/reference/make_fixtures.py --out tests/data/reference

Needs torch, transformers (>= 5), tokenizers, safetensors, gguf, numpy and accelerate (transformers
needs it to load a GGUF). The SmolLM2 part needs .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
(--model to point elsewhere; it is skipped with a message when absent, --only tiny skips it).

What it writes into --out (keep the folder small: it is committed):
- tiny_tok_llama3.json / tiny_tok_qwen2.json (+ *_config.json): the tiny models' BPE tokenizers,
  trained here on text this script writes (tools/reference/texts.py). Reused when present, so their
  ids stay stable; --retrain-tokenizers rebuilds them (training is deterministic).
- tiny_llama.json, tiny_qwen2.json, tiny_qwen3.json, smollm2.json: one fixture per model, with
  the tiny model's spec, per-tensor checksums of the generated weights (HF names, and the F32 GGUF
  layout after llama.cpp's Q/K permutation), and per prompt: text, input ids, top-20 logits and
  max |logit| at the last position (and at positions 511, 1023, 2047 of the long prompt), a greedy
  32-token continuation (EOS does not stop it; the first stop token's index is recorded) and the
  top1 - top2 logit gap at each generated step.
- <model>.<prompt>.pos<P>.f32: the full logits row at position P, little-endian float32.

The tiny models are built from the weight generator specified in tools/reference/tiny_spec.py and
tests/testing/tiny_model.h (identical in Python and C++), saved as Hugging Face folders in a temp
dir and run with transformers in float32 (eager attention). SmolLM2 is loaded from its GGUF by
transformers (Q4_1/Q8_0 dequantized to float32) with the faithful tokenizer of smollm2.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import texts  # noqa: E402
import tiny_spec  # noqa: E402
import tiny_tokenizers  # noqa: E402

NEW_TOKENS = 32
TOP_K = 20
LONG_POSITIONS = [511, 1023, 2047]
TOLERANCE = 1e-3  # max |engine - reference| <= TOLERANCE * max |reference logit|
TINY_TOKENIZER = {"llama": "tiny_tok_llama3", "qwen2": "tiny_tok_qwen2", "qwen3": "tiny_tok_qwen2"}
STOP_TOKEN_TEXTS = ["<|end_of_text|>", "<|eot_id|>", "<|endoftext|>", "<|im_end|>"]


def log(msg: str) -> None:
    print(f"[make_fixtures] {msg}", flush=True)


def build_prompts(tok) -> list[dict[str, Any]]:
    """The four prompts of every model: text, how it is tokenized, input ids."""
    chat_messages = [{"role": "user", "content": texts.CHAT_QUESTION}]
    chat_text = tok.apply_chat_template(chat_messages, tokenize=False, add_generation_prompt=True)
    prompts = [
        {"name": "plain", "text": texts.PLAIN_PROMPT, "add_special_tokens": True},
        {"name": "chat", "text": chat_text, "messages": chat_messages,
         "add_generation_prompt": True, "add_special_tokens": False},
        {"name": "code", "text": texts.CODE_PROMPT, "add_special_tokens": True},
        {"name": "long", "text": texts.long_prompt(), "add_special_tokens": True},
    ]
    for p in prompts:
        p["input_ids"] = tok(p["text"], add_special_tokens=p["add_special_tokens"])["input_ids"]
        p["n_tokens"] = len(p["input_ids"])
    long_len = prompts[-1]["n_tokens"]
    assert long_len >= 2048 + 1, f"long prompt has only {long_len} tokens"
    return prompts


def f32(x) -> float:
    """A float32 value as the shortest decimal that reads back to the same float32."""
    return float(str(np.float32(x)))


def top_k(row: np.ndarray, k: int) -> list[list[float]]:
    idx = np.argsort(-row.astype(np.float64), kind="stable")[:k]
    return [[int(i), f32(row[i])] for i in idx]


def run_prompt(model, tok, prompt: dict[str, Any], stop_ids: list[int], out_dir: str,
               model_name: str) -> dict[str, Any]:
    import torch
    from transformers import GenerationConfig

    ids = torch.tensor([prompt["input_ids"]], dtype=torch.long)
    n = ids.shape[1]
    positions = [p for p in LONG_POSITIONS if p < n - 1] if prompt["name"] == "long" else []
    positions.append(n - 1)
    with torch.no_grad():
        out = model(input_ids=ids, logits_to_keep=torch.tensor(positions, dtype=torch.long))
    logits = out.logits[0].float().numpy()
    assert logits.shape[0] == len(positions)

    pos_records = []
    for row, pos in zip(logits, positions):
        fname = f"{model_name}.{prompt['name']}.pos{pos}.f32"
        row.astype("<f4").tofile(os.path.join(out_dir, fname))
        pos_records.append({"position": pos, "last": pos == n - 1, "file": fname,
                            "max_abs_logit": f32(np.max(np.abs(row))),
                            "top20": top_k(row, TOP_K)})

    # generate() fills unset fields from model.generation_config, so EOS is disabled there too.
    model.generation_config.eos_token_id = None
    gen_cfg = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None,
                               bos_token_id=None,
                               pad_token_id=stop_ids[0] if stop_ids else 0,
                               output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        g = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gen_cfg)
    new_ids = g.sequences[0, n:].tolist()
    assert len(new_ids) == NEW_TOKENS, f"generate returned {len(new_ids)} tokens"
    gaps, step_max, step_top = [], [], []
    for step, step_logits in enumerate(g.logits):
        row = step_logits[0].float().numpy()
        order = np.argsort(-row.astype(np.float64), kind="stable")
        assert int(order[0]) == new_ids[step], "generate did not pick the argmax"
        gaps.append(f32(row[order[0]] - row[order[1]]))
        step_max.append(f32(np.max(np.abs(row))))
        step_top.append(top_k(row, TOP_K))
    # The cached first step must agree with the full forward pass.
    assert int(np.argmax(logits[-1])) == new_ids[0]
    first_stop = next((i for i, t in enumerate(new_ids) if t in stop_ids), -1)
    return {
        **prompt,
        "positions": pos_records,
        "greedy": {
            "ids": new_ids,
            "text": tok.decode(new_ids, skip_special_tokens=False),
            "first_stop_index": first_stop,
            "top1_minus_top2": gaps,
            "max_abs_logit": step_max,
            "top20": step_top,
        },
    }


def stop_token_ids(tok) -> list[int]:
    out = []
    for t in [tok.eos_token] + STOP_TOKEN_TEXTS:
        if t is None:
            continue
        i = tok.convert_tokens_to_ids(t)
        if isinstance(i, int) and i >= 0 and tok.convert_ids_to_tokens(i) == t and i not in out:
            out.append(i)
    return out


def write_fixture(out_dir: str, name: str, fixture: dict[str, Any]) -> None:
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=1, ensure_ascii=False)
        f.write("\n")


def summarize(name: str, results: list[dict[str, Any]]) -> None:
    for r in results:
        last = r["positions"][-1]
        log(f"{name}/{r['name']}: {r['n_tokens']} tokens, max|logit| {last['max_abs_logit']:.3f}, "
            f"min gap {min(r['greedy']['top1_minus_top2']):.4f}, "
            f"stop at {r['greedy']['first_stop_index']}, continuation {r['greedy']['text']!r}")


# ---- tiny models ---------------------------------------------------------------------------------

def check_generator(spec: tiny_spec.TinySpec, tensors: dict[str, np.ndarray]) -> None:
    """The numpy generator against the pure-Python one on a few elements of every tensor."""
    for name, a in tensors.items():
        flat = a.reshape(-1)
        for i in {0, 1, flat.size // 2, flat.size - 1}:
            ref = tiny_spec.tensor_value_scalar(name, i, spec.seed)
            assert flat[i] == np.float32(ref), (name, i, flat[i], ref)


def check_permutation(spec: tiny_spec.TinySpec, hf: dict[str, np.ndarray],
                      gguf_tensors: dict[str, np.ndarray]) -> None:
    """Our llama Q/K permutation is undone exactly by transformers' GGUF loader."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    proc = LlamaTensorProcessor(config={"num_attention_heads": spec.heads,
                                        "num_key_value_heads": spec.kv_heads})
    for l in range(spec.layers):
        for short, hf_short in (("attn_q", "q_proj"), ("attn_k", "k_proj")):
            g = gguf_tensors[f"blk.{l}.{short}.weight"]
            back = proc.process(g.copy(), f"blk.{l}.{short}.weight").weights
            assert np.array_equal(back, hf[f"model.layers.{l}.self_attn.{hf_short}.weight"])


def load_tiny(model_dir: str, spec: tiny_spec.TinySpec, tensors: dict[str, np.ndarray]):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, info = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    model.eval()
    bad = {k: v for k, v in info.items() if v and k != "missing_keys"}
    missing = [k for k in info.get("missing_keys", []) if k != "lm_head.weight"]
    assert not bad and not missing, (bad, missing)
    state = model.state_dict()
    for name, a in tensors.items():
        assert np.array_equal(state[name].numpy(), a), f"{name} differs after loading"
    if spec.tie_word_embeddings:
        assert np.array_equal(state["lm_head.weight"].numpy(), tensors["model.embed_tokens.weight"])
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    assert cfg.num_key_value_heads == spec.kv_heads and head_dim == spec.head_dim
    rope = getattr(cfg, "rope_parameters", None) or {}
    assert float(rope.get("rope_theta", getattr(cfg, "rope_theta", 0))) == spec.rope_theta, rope
    if spec.rope_scaling is not None:
        assert rope.get("rope_type") == "llama3" and rope.get("factor") == spec.rope_scaling[
            "factor"], rope
    tok = AutoTokenizer.from_pretrained(model_dir)
    return model, tok


def make_tiny(out_dir: str, tmp_dir: str) -> None:
    from tokenizers import Tokenizer

    for name, spec in tiny_spec.tiny_presets().items():
        t0 = time.time()
        tok_name = TINY_TOKENIZER[spec.arch]
        tok_json, tok_cfg = tiny_tokenizers.paths(out_dir, tok_name)
        tensors = tiny_spec.hf_tensors(spec)
        check_generator(spec, tensors)
        gguf_f32 = tiny_spec.gguf_f32_tensors(spec, tensors)
        if spec.arch == "llama":
            check_permutation(spec, tensors, gguf_f32)
        model_dir = os.path.join(tmp_dir, name)
        tiny_spec.write_hf_model(spec, model_dir, tok_json, tok_cfg, tensors)
        model, tok = load_tiny(model_dir, spec, tensors)

        prompts = build_prompts(tok)
        raw = Tokenizer.from_file(tok_json)
        for p in prompts:  # the transformers wrapper must not change the tokenizer.json pipeline
            assert raw.encode(p["text"], add_special_tokens=p["add_special_tokens"]).ids == \
                p["input_ids"], (name, p["name"])
        stops = stop_token_ids(tok)
        results = [run_prompt(model, tok, p, stops, out_dir, name) for p in prompts]

        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            config_json = json.load(f)
        fixture = {
            "model": name,
            "source": "tiny random-weight model (tools/reference/tiny_spec.py), transformers "
                      "float32, eager attention",
            "tolerance": TOLERANCE,
            "spec": spec.to_json(),
            "tokenizer": tok_name,
            "hf_config": config_json,
            "stop_ids": stops,
            "tensors": {k: tiny_spec.tensor_checksum(v) for k, v in tensors.items()},
            "gguf_f32_tensors": {k: tiny_spec.tensor_checksum(v) for k, v in gguf_f32.items()},
            "prompts": results,
        }
        if spec.rope_scaling is not None:
            fixture["rope_freqs"] = [float(x) for x in tiny_spec.llama3_rope_freqs(spec)]
        write_fixture(out_dir, name, fixture)
        summarize(name, results)
        log(f"{name}: done in {time.time() - t0:.1f}s")


# ---- SmolLM2 -------------------------------------------------------------------------------------

def make_smollm2(out_dir: str, gguf_path: str) -> None:
    import smollm2

    t0 = time.time()
    tok, raw = smollm2.faithful_tokenizer(gguf_path)
    auto = smollm2.gguf_auto_tokenizer(gguf_path)
    model = smollm2.load_model(gguf_path)
    prompts = build_prompts(tok)
    differs = []
    for p in prompts:
        assert raw.encode(p["text"], add_special_tokens=p["add_special_tokens"]).ids == \
            p["input_ids"]
        a = auto(p["text"], add_special_tokens=p["add_special_tokens"])["input_ids"]
        if a != p["input_ids"]:
            differs.append(p["name"])
    probe = "x = [1,  2,   3]"
    probe_faithful = tok(probe, add_special_tokens=False)["input_ids"]
    probe_auto = auto(probe, add_special_tokens=False)["input_ids"]
    stops = stop_token_ids(tok)
    results = [run_prompt(model, tok, p, stops, out_dir, "smollm2") for p in prompts]
    fixture = {
        "model": "smollm2",
        "source": "SmolLM2-135M-Instruct.Q4_1.gguf loaded by transformers (gguf_file=..., "
                  "float32, sdpa attention; Q4_1/Q8_0 dequantized by gguf-py)",
        "gguf_file": os.path.basename(gguf_path),
        "gguf_size": os.path.getsize(gguf_path),
        "tolerance": TOLERANCE,
        "tokenizer": "faithful SmolLM2 tokenizer: BPE over the GGUF vocab/merges, pre-tokenizer "
                     "Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)]",
        "tokenizer_note": {
            "prompts_where_transformers_gguf_tokenizer_differs": differs,
            "probe_text": probe,
            "probe_ids_faithful": probe_faithful,
            "probe_ids_transformers_gguf": probe_auto,
        },
        "stop_ids": stops,
        "prompts": results,
    }
    write_fixture(out_dir, "smollm2", fixture)
    summarize("smollm2", results)
    log(f"smollm2: tokenizer differs from transformers' GGUF conversion on {differs or 'none'}; "
        f"probe {probe!r}: faithful {probe_faithful} vs transformers {probe_auto}")
    log(f"smollm2: done in {time.time() - t0:.1f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/reference")
    ap.add_argument("--model", default=".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--only", choices=["all", "tiny", "smollm2"], default="all")
    ap.add_argument("--retrain-tokenizers", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    os.makedirs(args.out, exist_ok=True)

    tok_files = [p for n in tiny_tokenizers.BUILDERS for p in tiny_tokenizers.paths(args.out, n)]
    if args.retrain_tokenizers or not all(os.path.exists(p) for p in tok_files):
        log("training the tiny tokenizers")
        tiny_tokenizers.write_all(args.out)

    if args.only in ("all", "tiny"):
        with tempfile.TemporaryDirectory(prefix="icecache-tiny-") as tmp:
            make_tiny(args.out, tmp)
    if args.only in ("all", "smollm2"):
        if os.path.exists(args.model):
            make_smollm2(args.out, args.model)
        else:
            log(f"SKIPPED SmolLM2: {args.model} not found")
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    log(f"{args.out}: {total / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
