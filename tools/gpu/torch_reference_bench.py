#!/usr/bin/env python3
"""PyTorch reference for `icecache bench` on the same GPU: transformers LlamaForCausalLM built
from a config with random bf16 weights (the Llama-3.1-8B shape by default), sdpa attention, a
static KV cache, and optionally torch.compile of the decode step.

For each context length L (and batch B): prefill L - D prompt tokens (batch 1: one forward;
batch > 1: the cache is filled with random K/V instead, since decode speed does not depend on
the values and B long prefills would dominate the run), then D greedy decode steps. Prints one
JSON object per line (and a summary list at the end) with prefill tokens/s and decode ms/step.

Also measures the device-to-device copy bandwidth (bytes read + written per second), which
tools/gpu/check_and_bench.sh uses for the bandwidth floor.
"""
import argparse
import json
import math
import sys
import time

import torch


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def copy_bandwidth(gib=4):
    n = gib * (1 << 30) // 2
    x = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    times.sort()
    t = times[len(times) // 2]
    del x, y
    torch.cuda.empty_cache()
    return 2 * n * 2 / t  # bytes read + written per second


def make_config(args):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=args.layers,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        attn_implementation="sdpa", torch_dtype=torch.bfloat16)


def make_cache(config, batch, max_len):
    from transformers import StaticCache
    try:
        return StaticCache(config=config, max_cache_len=max_len)
    except TypeError:
        return StaticCache(config=config, max_batch_size=batch, max_cache_len=max_len,
                           device="cuda", dtype=torch.bfloat16)


def cache_tensors(cache):
    if hasattr(cache, "layers"):
        for layer in cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name, None)
                if t is not None:
                    yield t
    else:
        yield from cache.key_cache
        yield from cache.value_cache


def run_case(model, config, ctx, batch, decode, step_fn):
    prompt = ctx - decode
    cache = make_cache(config, batch, ctx)
    g = torch.Generator(device="cuda").manual_seed(1234)
    ids = torch.randint(0, config.vocab_size, (batch, prompt), device="cuda", generator=g)
    torch.cuda.synchronize()
    prefill_tps = None
    if batch == 1:
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model(input_ids=ids, cache_position=torch.arange(prompt, device="cuda"),
                        past_key_values=cache, use_cache=True, logits_to_keep=1)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        prefill_tps = prompt / (time.perf_counter() - t0)
        del out
    else:
        with torch.no_grad():  # one token to lay the cache out, then random K/V
            out = model(input_ids=ids[:, :1], cache_position=torch.arange(1, device="cuda"),
                        past_key_values=cache, use_cache=True, logits_to_keep=1)
        for t in cache_tensors(cache):
            t.normal_()
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        del out
    torch.cuda.synchronize()
    times = []
    pos = prompt
    with torch.no_grad():
        for i in range(decode):
            t0 = time.perf_counter()
            tok = step_fn(tok, torch.tensor([pos], device="cuda"), cache)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            pos += 1
    # The first steps include warm-up (compilation, graph capture): use the later half.
    steady = sorted(times[len(times) // 2:])
    decode_ms = 1e3 * steady[len(steady) // 2]
    del cache
    torch.cuda.empty_cache()
    return prefill_tps, decode_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="4096,32768,131072")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--compile", action="store_true", help="torch.compile the decode step")
    ap.add_argument("--bandwidth", action="store_true", help="only measure copy bandwidth")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    if args.bandwidth:
        print(json.dumps({"copy_bandwidth_bytes_per_s": copy_bandwidth()}), flush=True)
        return
    import transformers
    from transformers import LlamaForCausalLM
    config = make_config(args)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device("cuda"):
        torch.set_default_dtype(torch.bfloat16)
        model = LlamaForCausalLM(config).eval()
        torch.set_default_dtype(torch.float32)
    log(f"model built in {time.perf_counter() - t0:.1f}s; transformers {transformers.__version__}, "
        f"torch {torch.__version__}, attention {model.config._attn_implementation}")

    def step(tok, pos, cache):
        out = model(input_ids=tok, cache_position=pos, past_key_values=cache, use_cache=True)
        return out.logits[:, -1].argmax(-1, keepdim=True)

    step_fn = step
    compiled = False
    if args.compile:
        try:
            graph_step = torch.compile(step, mode="reduce-overhead", fullgraph=False)

            def step_fn(tok, pos, cache):
                # The CUDA graph reuses its output buffers on the next replay: mark each step
                # and keep a copy of the token.
                torch.compiler.cudagraph_mark_step_begin()
                return graph_step(tok, pos, cache).clone()

            compiled = True
        except Exception as e:  # noqa: BLE001 - report and fall back to eager
            log(f"torch.compile unavailable: {e}")
    # Warm-up (cuBLAS handles, kernel loading, and the compile when asked) off the clock.
    try:
        run_case(model, config, 512, 1, 4, step_fn)
    except Exception as e:  # noqa: BLE001 - report and fall back to eager
        if not compiled:
            raise
        log(f"compiled step failed in the warm-up ({str(e)[:300]}); running eager")
        step_fn, compiled = step, False
        run_case(model, config, 512, 1, 4, step_fn)
    results = []
    for ctx in [int(c) for c in args.contexts.split(",")]:
        batch = args.batch
        try:
            while True:
                try:
                    p, d = run_case(model, config, ctx, batch, args.decode, step_fn)
                    break
                except torch.cuda.OutOfMemoryError:
                    torch.cuda.empty_cache()
                    if batch == 1:
                        raise
                    log(f"batch {batch} does not fit at context {ctx}; trying {batch - 1}")
                    batch -= 1
            r = {"context": ctx, "batch": batch, "prefill_tokens_per_second": p,
                 "decode_ms_per_step": d, "compiled": compiled}
            if batch != args.batch:
                r["requested_batch"] = args.batch
        except torch.cuda.OutOfMemoryError as e:
            torch.cuda.empty_cache()
            r = {"context": ctx, "batch": args.batch, "error": "out of memory: " + str(e)[:200]}
        except Exception as e:  # noqa: BLE001 - a failing case must not hide the others
            if compiled:
                log(f"compiled step failed ({e}); retrying eager")
                step_fn, compiled = step, False
                p, d = run_case(model, config, ctx, args.batch, args.decode, step_fn)
                r = {"context": ctx, "batch": args.batch, "prefill_tokens_per_second": p,
                     "decode_ms_per_step": d, "compiled": False}
            else:
                r = {"context": ctx, "batch": args.batch, "error": str(e)[:300]}
        print(json.dumps(r), flush=True)
        results.append(r)


if __name__ == "__main__":
    main()
