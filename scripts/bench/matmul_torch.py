"""PyTorch baseline for tessera's `bench -o MUL_MAT`: torch.matmul of the same shapes on the GPU,
timed by CUDA events over batches of back-to-back calls (the median batch), printed in bench's
line format so the two can be read side by side. MUL_MAT(m, n, k) is an [m, k] weight matrix
times k x n activations: 2 m n k FLOP.

Usage: python3 matmul_torch.py [--shapes 4096x4096x4096,4096x512x14336] [--dtypes f16,bf16,f32]
[--time SECONDS]. f32 runs without TF32 unless --tf32 is given."""
import argparse
import statistics

import torch

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def time_case(a, b, seconds):
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device="cuda")
    for _ in range(3):
        torch.matmul(a, b, out=out)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.matmul(a, b, out=out)
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end) / 1e3, 1e-6)
    batch = max(1, int(0.02 / one))
    times = []
    spent = 0.0
    while spent < seconds or len(times) < 3:
        start.record()
        for _ in range(batch):
            torch.matmul(a, b, out=out)
        end.record()
        end.synchronize()
        t = start.elapsed_time(end) / 1e3
        times.append(t / batch)
        spent += t
    return statistics.median(times), batch * len(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="4096x4096x4096,4096x512x14336", help="m x n x k, comma separated")
    p.add_argument("--dtypes", default="f16,bf16,f32")
    p.add_argument("--time", type=float, default=1.0)
    p.add_argument("--tf32", action="store_true")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, tf32={a.tf32}")
    gen = torch.Generator(device="cuda").manual_seed(1)
    for shape in a.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        for name in a.dtypes.split(","):
            dt = DTYPES[name]
            w = torch.rand(m, k, generator=gen, device="cuda").sub_(0.5).to(dt)
            x = torch.rand(k, n, generator=gen, device="cuda").sub_(0.5).to(dt)
            t, runs = time_case(w, x, a.time)
            flop = 2.0 * m * n * k
            print(
                f"  torch.matmul(type={name},m={m},n={n},k={k}): {runs} runs - {t * 1e6:.2f} us/run - "
                f"{flop / 1e9:.2f} GFLOP/run - {flop / t / 1e12:.2f} TFLOPS"
            )


if __name__ == "__main__":
    main()
