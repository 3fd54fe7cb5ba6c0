"""What TL401's fix buys a convolution net (GPU, not a benchmark against a peer): fp32 training of torchvision's
ResNet-50 (batch 64, 224 px) and ResNet-18 (CIFAR, batch 256) with TF32 matmuls off (PyTorch's default) and on;
cuDNN's convolutions keep their default (TF32 on). Prints one JSON line: the best of two runs of 30 steps each.

    python bench/tl401_conv_tf32.py
"""
import json
import time

import torch
import torchvision

torch.backends.cudnn.benchmark = True
CASES = (("resnet50_b64", lambda: torchvision.models.resnet50(), (64, 3, 224, 224)),
         ("resnet18_cifar_b256", lambda: torchvision.models.resnet18(num_classes=10), (256, 3, 32, 32)))


def step_ms(model, x, y, steps=30, warm=10):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    crit = torch.nn.CrossEntropyLoss()
    start = 0.0
    for i in range(warm + steps):
        if i == warm:
            torch.cuda.synchronize()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        crit(model(x), y).backward()
        opt.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1000


def main():
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
           "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    for name, build, shape in CASES:
        model = build().cuda()
        x = torch.randn(*shape, device="cuda")
        y = torch.randint(0, 10, (shape[0],), device="cuda")
        times: dict[str, list[float]] = {}
        for _ in range(2):
            for tf32 in (False, True):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                times.setdefault(f"tf32_{tf32}", []).append(step_ms(model, x, y))
        out[name] = {k: min(v) for k, v in times.items()}
        out[name]["speedup"] = out[name]["tf32_False"] / out[name]["tf32_True"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
