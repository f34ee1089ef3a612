"""Tiny random-weight models: spec, deterministic weights, HF folder writer, GGUF tensor layout.

The weight generator is specified identically here and in tests/testing/tiny_model.h (C++); both
must produce bit-identical float32 tensors. For a tensor with Hugging Face name N, element index i
(row-major) and the model's 64-bit seed S, all arithmetic modulo 2**64:

    state = (fnv1a64(utf8(N)) XOR S) + i
    z     = splitmix64(state)
    v     = (z >> 40) - 2**23                  # signed integer in [-2**23, 2**23)
    value = float32(v) * 2**scale_exp          # exact: |v| < 2**24, power-of-two scale
    norms: value = float32(1) + float32(v) * 2**-26, rounded once to nearest-even float32

scale_exp by tensor kind: embeddings and lm_head -25, projections (*_proj.weight) -26,
biases -26, norm weights (1 + v * 2**-26).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any

import numpy as np

MASK64 = (1 << 64) - 1
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
SM_GAMMA = 0x9E3779B97F4A7C15
SM_M1 = 0xBF58476D1CE4E5B9
SM_M2 = 0x94D049BB133111EB


def fnv1a64(data: bytes) -> int:
    h = FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & MASK64
    return h


def splitmix64_scalar(x: int) -> int:
    z = (x + SM_GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * SM_M1) & MASK64
    z = ((z ^ (z >> 27)) * SM_M2) & MASK64
    return z ^ (z >> 31)


def splitmix64_array(x: np.ndarray) -> np.ndarray:
    """splitmix64 over a uint64 array; numpy's uint64 arithmetic wraps modulo 2**64."""
    assert x.dtype == np.uint64
    with np.errstate(over="ignore"):
        z = x + np.uint64(SM_GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(SM_M1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(SM_M2)
        return z ^ (z >> np.uint64(31))


# Tensor kinds and their scale exponents.
KIND_EMBEDDING = "embedding"
KIND_OUTPUT = "output"
KIND_PROJECTION = "projection"
KIND_NORM = "norm"
KIND_BIAS = "bias"
SCALE_EXP = {KIND_EMBEDDING: -25, KIND_OUTPUT: -25, KIND_PROJECTION: -26, KIND_BIAS: -26,
             KIND_NORM: -26}


def tensor_kind(name: str) -> str:
    if name == "model.embed_tokens.weight":
        return KIND_EMBEDDING
    if name == "lm_head.weight":
        return KIND_OUTPUT
    if name.endswith(".bias"):
        return KIND_BIAS
    if name.endswith("norm.weight"):
        return KIND_NORM
    if name.endswith("_proj.weight"):
        return KIND_PROJECTION
    raise ValueError(f"no weight kind for tensor {name!r}")


def tensor_values(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    n = int(np.prod(shape))
    base = (fnv1a64(name.encode("utf-8")) ^ seed) & MASK64
    with np.errstate(over="ignore"):
        state = np.arange(n, dtype=np.uint64) + np.uint64(base)
    z = splitmix64_array(state)
    v = (z >> np.uint64(40)).astype(np.int64) - (1 << 23)
    kind = tensor_kind(name)
    scaled = v.astype(np.float32) * np.float32(2.0 ** SCALE_EXP[kind])
    if kind == KIND_NORM:
        scaled = np.float32(1.0) + scaled
    assert scaled.dtype == np.float32
    return scaled.reshape(shape)


def tensor_value_scalar(name: str, i: int, seed: int) -> float:
    """Slow reference for one element (pure Python ints); used to cross-check the numpy path."""
    base = (fnv1a64(name.encode("utf-8")) ^ seed) & MASK64
    z = splitmix64_scalar((base + i) & MASK64)
    v = (z >> 40) - (1 << 23)
    kind = tensor_kind(name)
    x = np.float32(v) * np.float32(2.0 ** SCALE_EXP[kind])
    if kind == KIND_NORM:
        x = np.float32(np.float32(1.0) + x)
    return float(x)


@dataclasses.dataclass
class TinySpec:
    name: str
    arch: str  # "llama" | "qwen2" | "qwen3"
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float
    rms_eps: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    seed: int
    # Llama-3 rope scaling: {factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings}, or None.
    rope_scaling: dict[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["seed"] = f"0x{self.seed:016x}"
        return d


def tiny_presets() -> dict[str, TinySpec]:
    # Keep in sync with TinyLlamaSpec / TinyQwen2Spec / TinyQwen3Spec in tests/testing/tiny_model.cc
    # (the C++ test asserts that the fixture's spec equals them).
    return {
        "tiny_llama": TinySpec(
            name="tiny_llama", arch="llama", hidden=256, layers=3, heads=4, kv_heads=2,
            head_dim=64, ffn=512, vocab=1024, rope_theta=500000.0, rms_eps=1e-5,
            tie_word_embeddings=False, max_position_embeddings=32768, seed=0x11A3A000000001,
            rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8192}),
        "tiny_qwen2": TinySpec(
            name="tiny_qwen2", arch="qwen2", hidden=256, layers=2, heads=4, kv_heads=2,
            head_dim=64, ffn=768, vocab=1024, rope_theta=1000000.0, rms_eps=1e-6,
            tie_word_embeddings=True, max_position_embeddings=4096, seed=0x0E2000000002),
        "tiny_qwen3": TinySpec(
            name="tiny_qwen3", arch="qwen3", hidden=256, layers=2, heads=4, kv_heads=2,
            head_dim=128, ffn=512, vocab=1024, rope_theta=1000000.0, rms_eps=1e-6,
            tie_word_embeddings=True, max_position_embeddings=4096, seed=0x0E3000000003),
    }


def hf_tensor_shapes(spec: TinySpec) -> list[tuple[str, tuple[int, ...]]]:
    """Hugging Face tensor names and row-major shapes, in the order the writers emit them."""
    h, q_dim, kv_dim = spec.hidden, spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    out: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (spec.vocab, h))]
    for l in range(spec.layers):
        p = f"model.layers.{l}."
        out.append((p + "input_layernorm.weight", (h,)))
        out.append((p + "self_attn.q_proj.weight", (q_dim, h)))
        if spec.arch == "qwen2":
            out.append((p + "self_attn.q_proj.bias", (q_dim,)))
        out.append((p + "self_attn.k_proj.weight", (kv_dim, h)))
        if spec.arch == "qwen2":
            out.append((p + "self_attn.k_proj.bias", (kv_dim,)))
        out.append((p + "self_attn.v_proj.weight", (kv_dim, h)))
        if spec.arch == "qwen2":
            out.append((p + "self_attn.v_proj.bias", (kv_dim,)))
        out.append((p + "self_attn.o_proj.weight", (h, q_dim)))
        if spec.arch == "qwen3":
            out.append((p + "self_attn.q_norm.weight", (spec.head_dim,)))
            out.append((p + "self_attn.k_norm.weight", (spec.head_dim,)))
        out.append((p + "post_attention_layernorm.weight", (h,)))
        out.append((p + "mlp.gate_proj.weight", (spec.ffn, h)))
        out.append((p + "mlp.up_proj.weight", (spec.ffn, h)))
        out.append((p + "mlp.down_proj.weight", (h, spec.ffn)))
    out.append(("model.norm.weight", (h,)))
    if not spec.tie_word_embeddings:
        out.append(("lm_head.weight", (spec.vocab, h)))
    return out


def hf_tensors(spec: TinySpec) -> dict[str, np.ndarray]:
    return {name: tensor_values(name, shape, spec.seed) for name, shape in hf_tensor_shapes(spec)}


# ---- GGUF layout (llama.cpp's convert_hf_to_gguf conventions) -----------------------------------

_GGUF_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_tensor_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".", 3)  # model, layers, N, rest
    assert parts[0] == "model" and parts[1] == "layers", hf_name
    return f"blk.{parts[2]}.{_GGUF_LAYER_NAMES[parts[3]]}"


def llama_rope_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF (rotate-half) row order -> llama.cpp (interleaved pairs) row order, per head.

    Within each head of d rows, GGUF row 2*j + s holds HF row s*(d/2) + j (s in {0, 1}).
    """
    rows = w.shape[0]
    d = rows // n_head
    out = np.empty_like(w)
    for h in range(n_head):
        for j in range(d // 2):
            for s in range(2):
                out[h * d + 2 * j + s] = w[h * d + s * (d // 2) + j]
    return out


def gguf_f32_tensors(spec: TinySpec, hf: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The tensors of an all-F32 GGUF of the model (without rope_freqs), by GGUF name."""
    out = {}
    for name, w in hf.items():
        g = gguf_tensor_name(name)
        if spec.arch == "llama" and name.endswith("q_proj.weight"):
            w = llama_rope_permute(w, spec.heads)
        elif spec.arch == "llama" and name.endswith("k_proj.weight"):
            w = llama_rope_permute(w, spec.kv_heads)
        out[g] = w
    return out


def llama3_rope_freqs(spec: TinySpec) -> np.ndarray:
    """Per-frequency divisors llama.cpp stores as rope_freqs.weight (computed here in float64)."""
    rs = spec.rope_scaling
    assert rs is not None
    d = spec.head_dim
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for i in range(0, d, 2):
        freq = 1.0 / (spec.rope_theta ** (i / d))
        wavelen = 2.0 * np.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def tensor_checksum(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a, dtype="<f4")
    return {
        "shape": list(a.shape),
        "sum": float(np.sum(a, dtype=np.float64)),
        "fnv1a64": f"0x{fnv1a64(a.tobytes()):016x}",
    }


# ---- Hugging Face folder ------------------------------------------------------------------------

def token_id(tok_json: dict[str, Any], text: str) -> int | None:
    for t in tok_json.get("added_tokens", []):
        if t["content"] == text:
            return int(t["id"])
    v = tok_json["model"]["vocab"].get(text)
    return None if v is None else int(v)


def hf_config(spec: TinySpec, tok_json: dict[str, Any], tok_config: dict[str, Any]) -> dict:
    """config.json in the shape the real checkpoints of each family use."""
    bos_name = tok_config.get("bos_token") or "<|endoftext|>"  # Qwen: bos_token_id = <|endoftext|>
    cfg: dict[str, Any] = {
        "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                           "qwen3": "Qwen3ForCausalLM"}[spec.arch]],
        "model_type": spec.arch,
        "attention_dropout": 0.0,
        "bos_token_id": token_id(tok_json, bos_name),
        "eos_token_id": token_id(tok_json, tok_config["eos_token"]),
        "hidden_act": "silu",
        "hidden_size": spec.hidden,
        "initializer_range": 0.02,
        "intermediate_size": spec.ffn,
        "max_position_embeddings": spec.max_position_embeddings,
        "num_attention_heads": spec.heads,
        "num_hidden_layers": spec.layers,
        "num_key_value_heads": spec.kv_heads,
        "rms_norm_eps": spec.rms_eps,
        "rope_theta": spec.rope_theta,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": spec.vocab,
    }
    if spec.arch == "llama":
        cfg["attention_bias"] = False
        cfg["mlp_bias"] = False
        cfg["pretraining_tp"] = 1
        if spec.rope_scaling is not None:
            cfg["rope_scaling"] = dict(spec.rope_scaling, rope_type="llama3")
    else:
        cfg["use_sliding_window"] = False
        cfg["sliding_window"] = None
        cfg["max_window_layers"] = spec.layers
    if spec.arch == "qwen3":
        cfg["head_dim"] = spec.head_dim
        cfg["attention_bias"] = False
    if spec.arch != "qwen3":
        assert spec.head_dim * spec.heads == spec.hidden, "llama/qwen2 need head_dim = hidden/heads"
    return cfg


def write_hf_model(spec: TinySpec, out_dir: str, tok_json_path: str, tok_config_path: str,
                   tensors: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    os.makedirs(out_dir, exist_ok=True)
    with open(tok_json_path, encoding="utf-8") as f:
        tok_json = json.load(f)
    with open(tok_config_path, encoding="utf-8") as f:
        tok_config = json.load(f)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(hf_config(spec, tok_json, tok_config), f, indent=2)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    shutil.copyfile(tok_json_path, os.path.join(out_dir, "tokenizer.json"))
    shutil.copyfile(tok_config_path, os.path.join(out_dir, "tokenizer_config.json"))
