"""The two small CNNs of `bench/fashion_mnist.py`, their training with torch, and their ONNX export.

Both are shaped for tvm_fuse's int8 kernels, which take dense convs with a multiple of 4 input
and of 16 output channels: every conv but the 1-channel stem (and, in the MobileNet, the
depthwise ones) has 16, 32, 64 ... channels on both sides.

- `resnet`: stem conv3x3 1->16, four basic blocks (conv-bn-relu-conv-bn + shortcut, relu) of
  32, 32, 64, 64 channels, the channel changes at stride 2 with 1x1 projection shortcuts,
  global average pool, Linear 64->10.
- `mobilenet`: stem conv3x3 1->16 at stride 2, five inverted residual blocks (1x1 expand x4
  + ReLU6, 3x3 depthwise + ReLU6, 1x1 project; residual add where shapes match) of 32, 32,
  64, 64, 64 channels, a 1x1 conv to 128 + ReLU6, global average pool, Linear 128->10.

Training is one thread, seeded: AdamW with a one-cycle schedule, random horizontal flips.
"""

from __future__ import annotations

import io
import time

import numpy as np
import onnx
import torch
from torch import nn

from tvm_fuse.benchmarking.datasets import fashion_mnist

OPSET = 17
IR_VERSION = 9  # what opset 17 needs; ONNX Runtime rejects IR versions newer than it knows


def conv_bn(cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1, act=None) -> list[nn.Module]:
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return layers + ([act()] if act else [])


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(*conv_bn(cin, cout, 3, stride, act=nn.ReLU), *conv_bn(cout, cout, 3))
        same = cin == cout and stride == 1
        self.shortcut = nn.Identity() if same else nn.Sequential(*conv_bn(cin, cout, 1, stride))
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int = 4):
        super().__init__()
        hidden = cin * expand
        self.body = nn.Sequential(
            *conv_bn(cin, hidden, 1, act=nn.ReLU6),
            *conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            *conv_bn(hidden, cout, 1),
        )
        self.residual = cin == cout and stride == 1

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def resnet() -> nn.Module:
    return nn.Sequential(
        *conv_bn(1, 16, act=nn.ReLU),
        BasicBlock(16, 32, 2), BasicBlock(32, 32, 1), BasicBlock(32, 64, 2), BasicBlock(64, 64, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )


def mobilenet() -> nn.Module:
    return nn.Sequential(
        *conv_bn(1, 16, 3, 2, act=nn.ReLU6),
        InvertedResidual(16, 32, 1), InvertedResidual(32, 32, 1),
        InvertedResidual(32, 64, 2), InvertedResidual(64, 64, 1), InvertedResidual(64, 64, 1),
        *conv_bn(64, 128, 1, act=nn.ReLU6),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
    )


NETWORKS = {"resnet": resnet, "mobilenet": mobilenet}


def train(name: str, epochs: int, batch: int = 128, lr: float = 3e-3, seed: int = 0) -> tuple[nn.Module, dict]:
    """The network `name` trained on the 60k training images; returns it in eval mode, with a
    log (loss per epoch, seconds, torch's top-1 on the test set)."""
    torch.set_num_threads(1)  # the machine is shared: one core
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    images, labels = (torch.from_numpy(a) for a in fashion_mnist.load("train"))
    model = NETWORKS[name]().to(memory_format=torch.channels_last)  # faster on CPU
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    steps = len(images) // batch
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, lr, total_steps=epochs * steps)
    log = {"epochs": epochs, "batch": batch, "lr": lr, "seed": seed, "loss": []}
    start = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        order = torch.from_numpy(rng.permutation(len(images)))
        total = 0.0
        for step in range(steps):
            index = order[step * batch:(step + 1) * batch]
            x = images[index]
            flip = torch.from_numpy(rng.random(batch) < 0.5)
            x[flip] = x[flip].flip(-1)
            loss = nn.functional.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), labels[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item()
        log["loss"].append(total / steps)
        print(f"{name} epoch {epoch + 1}/{epochs}: loss {total / steps:.4f} ({time.perf_counter() - start:.0f} s)")
    log["seconds"] = time.perf_counter() - start
    model = model.to(memory_format=torch.contiguous_format).eval()
    log["torch_top1"] = torch_top1(model)
    return model, log


@torch.no_grad()
def torch_top1(model: nn.Module, batch: int = 500) -> float:
    images, labels = fashion_mnist.load("test")
    hits = sum(int((model(torch.from_numpy(images[i:i + batch])).argmax(1).numpy() == labels[i:i + batch]).sum())
               for i in range(0, len(images), batch))
    return 100 * hits / len(images)


def export(model: nn.Module) -> onnx.ModelProto:
    """ONNX opset 17: image float32 [batch, 1, 28, 28] -> logits [batch, 10], batch symbolic.
    The exporter folds each eval-mode BatchNormalization into its conv."""
    buffer = io.BytesIO()
    torch.onnx.export(
        model.eval(), torch.zeros(1, 1, 28, 28), buffer, dynamo=False, opset_version=OPSET,
        input_names=["image"], output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
    )
    exported = onnx.load_from_string(buffer.getvalue())
    exported.ir_version = IR_VERSION
    onnx.checker.check_model(exported)
    return exported
