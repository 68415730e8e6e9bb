"""A small training script with three classic zero_grad() bugs. Try: zerograd examples/"""
import torch
from torch import nn, optim


def train_forgets_to_clear(model: nn.Module, loader, epochs: int) -> None:
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()  # gradients of every earlier batch are applied again


def train_clears_too_late(model: nn.Module, loader) -> None:
    optimizer = optim.Adam(model.parameters())
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.zero_grad()  # wipes the gradients the step is about to apply
        optimizer.step()


def train_with_accumulation(model: nn.Module, loader, accum_steps: int) -> None:
    optimizer = optim.AdamW(model.parameters())
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()  # runs every micro-batch: accumulation never happens
        loss = nn.functional.cross_entropy(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()


def train_correctly(model: nn.Module, loader) -> None:
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
