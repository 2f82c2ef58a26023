"""PyTorch baseline for tessera's bert_bench: a BertModel of the same configuration (random
weights: the time does not depend on them), SDPA attention, mean pooling and L2 normalisation,
timed like bert_bench (median of N calls after warm-up, inputs copied in and embeddings read
back). Usage: python3 minilm_torch.py CONFIG.json [--shapes 1x16,...] [--runs 20] [--dtype f32|f16]
[--compile]"""
import argparse
import json
import time

import torch
from transformers import BertConfig, BertModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("--shapes", default="1x16,1x128,32x48,1024x128")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    p.add_argument("--compile", action="store_true", help="torch.compile(mode='reduce-overhead')")
    a = p.parse_args()
    cfg = BertConfig(**json.load(open(a.config)))
    cfg._attn_implementation = "sdpa"
    dtype = torch.float16 if a.dtype == "f16" else torch.float32
    model = BertModel(cfg, add_pooling_layer=False).to("cuda", dtype).eval()

    def embed(ids, mask):
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(out.dtype)
        mean = (out * m).sum(1) / m.sum(1)
        return torch.nn.functional.normalize(mean.float(), dim=-1)

    fn = torch.compile(embed, mode="reduce-overhead") if a.compile else embed
    label = f"torch {torch.__version__} {a.dtype}{' compiled' if a.compile else ' eager'}"
    print(label)
    gen = torch.Generator().manual_seed(1)
    for shape in a.shapes.split(","):
        b, t = (int(v) for v in shape.split("x"))
        ids_host = torch.randint(1000, cfg.vocab_size, (b, t), generator=gen)
        mask_host = torch.ones(b, t, dtype=torch.long)
        times = []
        with torch.inference_mode():
            for i in range(a.warmup + a.runs):
                torch.cuda.synchronize()
                start = time.perf_counter()
                e = fn(ids_host.to("cuda"), mask_host.to("cuda")).cpu()
                if i >= a.warmup:
                    times.append((time.perf_counter() - start) * 1e3)
        times.sort()
        med = times[len(times) // 2]
        print(f"  {b:>5} x {t:<4} {med:9.3f} ms median  ({times[0]:.3f} .. {times[-1]:.3f}, {len(times)} runs)"
              f"  {b * t / med * 1e3:10.0f} tokens/s")


if __name__ == "__main__":
    main()
