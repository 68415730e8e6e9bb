# source: https://github.com/pyolimp/pyolimp/pull/35
# pattern: pyolimp's _train_loop takes each loss from the _evaluate_dataset generator (preprocess, model forward and a loss function over distortions all run inside the generator) and does backward, step, then zero_grad; the "fix: train backward gradient reset" moved the clear from before the backward to after the step, and both orders clear between steps
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean
from typing import Callable

import torch
from torch import nn, Tensor


class Distortion:
    def __init__(self, strength: float):
        self.strength = strength

    def __call__(self, image: Tensor) -> Tensor:
        return image * (1.0 - self.strength) + self.strength * image.mean()


class DistortionsGroup:
    def __init__(self, distortions: list[Distortion], dataloaders: list[list[Tensor]]):
        self.distortions_classes = distortions
        self.dataloaders = dataloaders
        self.composees = [lambda t: t for _ in dataloaders]


class PrecompensationNet(nn.Module):
    def __init__(self, channels: int = 3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels + 1, 8, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(8, channels, 3, padding=1))

    def preprocess(self, image: Tensor, psf: Tensor) -> Tensor:
        return torch.cat([image, psf], dim=1)

    def arguments(self, inputs: Tensor, psf: Tensor) -> dict:
        return {}

    def forward(self, inputs: Tensor) -> tuple[Tensor]:
        return (torch.sigmoid(self.body(inputs)),)


def _evaluate_dataset(model: nn.Module, dls, distortions_group: DistortionsGroup,
                      loss_function: Callable):
    transforms = [dls[1]] + distortions_group.composees
    for batches in zip(*dls[0], strict=True):
        datums = [transform(batch) for batch, transform in zip(batches, transforms)]
        inputs = model.preprocess(*datums)
        precompensated = model(inputs, **model.arguments(inputs, datums[-1]))
        assert isinstance(precompensated, tuple | list)
        loss = loss_function(precompensated, datums, distortions_group.distortions_classes)
        yield loss


def retinal_loss(precompensated: list[Tensor], datums: list[Tensor], distortions: list[Distortion]) -> Tensor:
    image = datums[0]
    retinal = precompensated[0]
    for distortion in distortions:
        retinal = distortion(retinal)
    return torch.nn.functional.mse_loss(retinal, image)


def _train_loop(model: nn.Module, epochs: int, dls_train: list[list[Tensor]],
                distortions_group: DistortionsGroup, optimizer: torch.optim.Optimizer,
                img_transform: Callable, loss_function: Callable) -> None:
    for epoch in range(epochs):
        model.train()
        train_loss = 0.0
        for loss in _evaluate_dataset(model, dls=(dls_train, img_transform),
                                      distortions_group=distortions_group,
                                      loss_function=loss_function):
            train_loss += loss.item()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        train_loss /= len(dls_train[0])
        model.eval()
        print(f"epoch {epoch}: {train_loss:g}")


def main():
    torch.manual_seed(0)
    images = [torch.rand(2, 3, 8, 8) for _ in range(4)]
    psfs = [torch.rand(2, 1, 8, 8) for _ in range(4)]
    group = DistortionsGroup([Distortion(0.3)], dataloaders=[psfs])
    model = PrecompensationNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    _train_loop(model, 3, [images] + group.dataloaders, group, optimizer,
                img_transform=lambda t: t, loss_function=retinal_loss)


if __name__ == "__main__":
    main()
