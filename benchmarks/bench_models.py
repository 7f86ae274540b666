"""Real models' training steps on the device against the same steps on CPU tensors.

A 2-layer ``nn.TransformerEncoder`` (d_model 256, 4 heads, ffn 1024, fp32, batch_first, batch
8x128): forward, MSE loss, backward and an optimizer step (SGD and Adam); a small language
model's step (an embedding of 5000 tokens, one such encoder layer, a head over the 5000 tokens,
``cross_entropy`` against the next tokens; Adam); a small convolutional network's step (two
convolutions, batch norm, pooling, a linear head; ``cross_entropy``; SGD); an LSTM classifier's
step (32 steps, Adam); and the demo's small models (``python -m torch_layouts demo``: an MLP, an
attention block) with their losses and SGD; on spyre and on the CPU, interleaved in one process.
Target: <= 1.1. Each figure's note counts what one device step does besides device kernels:
restickifies and CPU-fallback calls per op (``torch_layouts.stats``).
Run alone with ``python benchmarks/bench_models.py [--threads N]``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

if __package__ in (None, ""):  # run as a script: make the repository and this folder importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch_layouts  # noqa: E402
from torch_layouts.cli.demo import demo_models  # noqa: E402

try:
    from .common import Figure, compare
except ImportError:  # run as a script
    from common import Figure, compare  # noqa: E402

D_MODEL, HEADS, FFN, LAYERS, BATCH, TOKENS = 256, 4, 1024, 2, 8, 128
OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "SGD": lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9),
    "Adam": lambda params: torch.optim.Adam(params, lr=1e-4),
}


def encoder() -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, batch_first=True)
    return nn.TransformerEncoder(layer, LAYERS)


def training_step(model: nn.Module, optimizer: torch.optim.Optimizer, loss: Callable[[nn.Module], torch.Tensor]
                  ) -> Callable[[], None]:
    """One step: forward and loss, backward, optimizer step."""
    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss(model).backward()
        optimizer.step()
    return step


def step_counts(step: Callable[[], None]) -> dict:
    """Restickifies and CPU-fallback calls (per op) of one step."""
    torch_layouts.reset_stats()
    step()
    s = torch_layouts.stats()
    return {"restickify": s["restickify_count"], "fallbacks": s["fallbacks"]}


def steps(optimizer: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """(device step, CPU step) of the same model, data and optimizer."""
    torch.manual_seed(0)
    cpu = encoder()
    device = copy.deepcopy(cpu).to("spyre")
    x, y = torch.randn(BATCH, TOKENS, D_MODEL), torch.randn(BATCH, TOKENS, D_MODEL)
    make = OPTIMIZERS[optimizer]
    dx, dy = x.to("spyre"), y.to("spyre")
    return (training_step(device, make(device.parameters()), lambda m: nn.functional.mse_loss(m(dx), dy)),
            training_step(cpu, make(cpu.parameters()), lambda m: nn.functional.mse_loss(m(x), y)))


VOCAB = 5000


class LanguageModel(nn.Module):
    """Token embedding, one encoder layer, a head over the vocabulary."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        self.layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, batch_first=True)
        self.head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(tokens)))


def language_model_steps() -> tuple[Callable[[], None], Callable[[], None]]:
    """(device step, CPU step) of ``LanguageModel`` predicting each next token, Adam."""
    torch.manual_seed(0)
    cpu = LanguageModel()
    device = copy.deepcopy(cpu).to("spyre")
    tokens = torch.randint(0, VOCAB, (BATCH, TOKENS + 1), generator=torch.Generator().manual_seed(0))

    def loss(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    return tuple(training_step(model, OPTIMIZERS["Adam"](model.parameters()), functools.partial(loss, tokens=t))
                 for model, t in ((device, tokens.to("spyre")), (cpu, tokens)))


def conv_net() -> nn.Sequential:
    """Two 3x3 convolutions (batch norm and ReLU after the first, max pooling between), global
    average pooling, a linear head over 10 classes."""
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, 10))


def conv_net_steps() -> tuple[Callable[[], None], Callable[[], None]]:
    """(device step, CPU step) of ``conv_net`` classifying 16 32x32 RGB images, SGD with momentum."""
    torch.manual_seed(0)
    cpu = conv_net()
    device = copy.deepcopy(cpu).to("spyre")
    images, labels = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))

    def loss(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(model(images), labels)
    return tuple(training_step(model, OPTIMIZERS["SGD"](model.parameters()), functools.partial(loss, images=x, labels=y))
                 for model, x, y in ((device, images.to("spyre"), labels.to("spyre")), (cpu, images, labels)))


class RecurrentClassifier(nn.Module):
    """An LSTM over 32 steps of 64 features (hidden 128), a linear head on its last output."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(64, 128, batch_first=True)
        self.head = nn.Linear(128, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0][:, -1])


def recurrent_steps() -> tuple[Callable[[], None], Callable[[], None]]:
    """(device step, CPU step) of ``RecurrentClassifier`` on 16 sequences, Adam."""
    torch.manual_seed(0)
    cpu = RecurrentClassifier()
    device = copy.deepcopy(cpu).to("spyre")
    x, y = torch.randn(16, 32, 64), torch.randint(0, 5, (16,))

    def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(model(x), y)
    return tuple(training_step(model, OPTIMIZERS["Adam"](model.parameters()), functools.partial(loss, x=xs, y=ys))
                 for model, xs, ys in ((device, x.to("spyre"), y.to("spyre")), (cpu, x, y)))


def demo_steps() -> list[tuple[str, Callable[[], None], Callable[[], None]]]:
    """(name, device step, CPU step) of each of the demo's models (``cli/demo.demo_models``), SGD."""
    out = []
    for name, cpu, loss in demo_models():
        device = copy.deepcopy(cpu).to("spyre")
        out.append((name, *(training_step(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                          functools.partial(loss, device=where))
                             for model, where in ((device, "spyre"), (cpu, "cpu")))))
    return out


def _figure(name: str, device_step: Callable[[], None], cpu_step: Callable[[], None], repeat: int) -> Figure:
    device_step(), cpu_step()
    counts = step_counts(device_step)
    fallbacks = sum(counts["fallbacks"].values())
    note = (f"{counts['restickify']} restickifies, {fallbacks} CPU-fallback calls per step"
            + (f" ({', '.join(f'{op} x{n}' for op, n in counts['fallbacks'].items())})" if fallbacks else ""))
    return compare(f"{name} training step on spyre / CPU", 1.1, device_step, cpu_step, "same step on CPU", repeat,
                   note=note)


def run(repeat: int = 10) -> list[Figure]:
    """One figure per optimizer for the TransformerEncoder, one each for the language model, the
    convolutional network and the LSTM classifier, and one per demo model (SGD): the device training step over the CPU one."""
    figures = [_figure(f"TransformerEncoder ({name})", *steps(name), repeat) for name in OPTIMIZERS]
    figures.append(_figure("language model (embedding, encoder layer, 5000-token head; Adam)",
                           *language_model_steps(), repeat))
    figures.append(_figure("convolutional network (2 convolutions, batch norm, pooling; SGD) 16x3x32x32",
                           *conv_net_steps(), 5 * repeat))
    figures.append(_figure("recurrent classifier (LSTM 64->128 over 32 steps, batch 16; Adam)", *recurrent_steps(),
                           5 * repeat))
    return figures + [_figure(f"demo {name}", device, cpu, 5 * repeat) for name, device, cpu in demo_steps()]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--repeat", type=int, default=10, help="timed repetitions per figure (default 10)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(json.dumps([f.as_dict() for f in run(args.repeat)], indent=2))
