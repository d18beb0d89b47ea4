"""What emulate costs when the model lives on a CUDA device: the same emulated training step
with the model on the CPU and on the GPU (operands copied to the host, emulated there, results
copied back), for an MLP (256-512-256, batch 64) and a 2-block TransformerEncoder (d_model 64,
4 heads, batch 8 x 16) under torch-cuda-bf16, mxfp8 and nvfp4, SGD, mse. Prints the median of
five steps after three warm-up steps, and the ratio GPU / CPU. Exits 77 without a CUDA device.

    PYTHONPATH=build/python python3 examples/emulate_cuda_speed.py
"""
import statistics
import sys
import time

import torch

import halfway.torch as ht


def encoder():
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return model, torch.randn(8, 16, 64), torch.randn(8, 16, 64)


def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256))
    return model, torch.randn(64, 256), torch.randn(64, 256)


def step_time(build, device, recipe, warmup=3, timed=5):
    model, x, y = build()
    model, x, y = model.to(device), x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    with ht.emulate(model, recipe):
        for _ in range(warmup + timed):
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    return statistics.median(times[warmup:])


def main():
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    for build in (mlp, encoder):
        for recipe in ("torch-cuda-bf16", "mxfp8", "nvfp4"):
            cpu, gpu = step_time(build, "cpu", recipe), step_time(build, "cuda", recipe)
            print(f"{build.__name__} {recipe}: emulated step, model on the CPU {cpu * 1e3:.2f} ms, "
                  f"on the GPU {gpu * 1e3:.2f} ms ({gpu / cpu:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
