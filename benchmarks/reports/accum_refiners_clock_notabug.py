# source: https://github.com/finegrain-ai/refiners/pull/291
# pattern: Trainer.step computes the loss and calls Trainer.backward, which backpropagates the scaled loss every batch and steps and clears only when the TrainingClock callback (counting mini-batches in on_backward_end, resetting in on_optimizer_step_end) says is_optimizer_step; the PR claiming gradients were not accumulated was closed: it already accumulates (not a bug)
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean
from abc import ABC, abstractmethod
from functools import cached_property
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd import backward
from torch.optim import Optimizer
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)


class Callback:
    def on_train_begin(self, trainer: Any) -> None: ...
    def on_train_end(self, trainer: Any) -> None: ...
    def on_epoch_begin(self, trainer: Any) -> None: ...
    def on_epoch_end(self, trainer: Any) -> None: ...
    def on_batch_begin(self, trainer: Any) -> None: ...
    def on_batch_end(self, trainer: Any) -> None: ...
    def on_backward_begin(self, trainer: Any) -> None: ...
    def on_backward_end(self, trainer: Any) -> None: ...
    def on_optimizer_step_begin(self, trainer: Any) -> None: ...
    def on_optimizer_step_end(self, trainer: Any) -> None: ...


class TrainingClock(Callback):
    def __init__(self, dataset_length: int, batch_size: int, training_duration: int,
                 gradient_accumulation: int) -> None:
        self.dataset_length = dataset_length
        self.batch_size = batch_size
        self.training_duration = training_duration
        self.gradient_accumulation = gradient_accumulation
        self.num_batches_per_epoch = dataset_length // batch_size
        self.step = 0
        self.epoch = 0
        self.iteration = 0
        self.num_batches_processed = 0
        self.num_minibatches_processed = 0

    @cached_property
    def num_step_per_iteration(self) -> int:
        return self.gradient_accumulation

    @cached_property
    def num_steps(self) -> int:
        return self.training_duration

    def reset(self) -> None:
        self.step = 0
        self.epoch = 0
        self.iteration = 0
        self.num_batches_processed = 0
        self.num_minibatches_processed = 0

    @property
    def is_optimizer_step(self) -> bool:
        return self.num_minibatches_processed == self.num_step_per_iteration

    @property
    def done(self) -> bool:
        return self.step >= self.num_steps

    def on_train_begin(self, trainer: Any) -> None:
        trainer.clock.reset()

    def on_epoch_end(self, trainer: Any) -> None:
        trainer.clock.epoch += 1
        trainer.clock.num_batches_processed = 0

    def on_backward_end(self, trainer: Any) -> None:
        trainer.clock.step += 1
        trainer.clock.num_batches_processed += 1
        trainer.clock.num_minibatches_processed += 1

    def on_optimizer_step_end(self, trainer: Any) -> None:
        trainer.clock.iteration += 1
        trainer.clock.num_minibatches_processed = 0


class ModelItem:
    def __init__(self, name: str, config: dict, model: nn.Module) -> None:
        self.name = name
        self.config = config
        self.model = model
        self.learnable_parameters = [p for p in model.parameters() if p.requires_grad]


class RandomDataset(Dataset):
    def __init__(self, length: int) -> None:
        self.items = [(torch.randn(4), torch.randn(1)) for _ in range(length)]

    def __getitem__(self, index: int):
        return self.items[index]

    def __len__(self) -> int:
        return len(self.items)


class Trainer(ABC):
    def __init__(self, config: dict) -> None:
        self.models: dict[str, ModelItem] = {}
        self.callbacks: dict[str, Callback] = {}
        self.config = config
        self._load_callbacks()
        self._load_models()

    def _load_callbacks(self) -> None:
        training = self.config["training"]
        self.callbacks["clock"] = TrainingClock(
            dataset_length=self.dataset_length,
            batch_size=training["batch_size"],
            training_duration=training["duration"],
            gradient_accumulation=training["gradient_accumulation"],
        )

    @property
    def clock(self) -> TrainingClock:
        return self.callbacks["clock"]  # type: ignore[return-value]

    @abstractmethod
    def _load_models(self) -> None: ...

    @property
    def learnable_parameters(self) -> list[nn.Parameter]:
        return [param for item in self.models.values() for param in item.learnable_parameters]

    @cached_property
    def optimizer_parameters(self) -> list[dict[str, Any]]:
        params: list[dict[str, Any]] = []
        for item in self.models.values():
            model_optim_conf: dict[str, Any] = {}
            if item.config.get("learning_rate") is not None:
                model_optim_conf["lr"] = item.config["learning_rate"]
            params.append({"params": item.learnable_parameters, **model_optim_conf})
        return params

    @cached_property
    def optimizer(self) -> Optimizer:
        return torch.optim.AdamW(self.optimizer_parameters, lr=self.config["optimizer"]["learning_rate"])

    @property
    @abstractmethod
    def dataset_length(self) -> int: ...

    @cached_property
    @abstractmethod
    def dataset(self) -> Dataset: ...

    @cached_property
    def dataloader(self) -> DataLoader:
        return DataLoader(dataset=self.dataset, batch_size=self.config["training"]["batch_size"], shuffle=True)

    @abstractmethod
    def compute_loss(self, batch: Any) -> Tensor: ...

    def backward(self) -> None:
        """Backward pass on the loss."""
        self._call_callbacks(event_name="on_backward_begin")
        scaled_loss = self.loss / self.clock.num_step_per_iteration
        backward(tensors=scaled_loss)
        self._call_callbacks(event_name="on_backward_end")
        if self.clock.is_optimizer_step:
            self._call_callbacks(event_name="on_optimizer_step_begin")
            self.optimizer.step()
            self.optimizer.zero_grad()
            self._call_callbacks(event_name="on_optimizer_step_end")

    def step(self, batch: Any) -> None:
        """Perform a single training step."""
        loss = self.compute_loss(batch=batch)
        self.loss = loss
        self.backward()

    def epoch(self) -> None:
        """Perform a single epoch."""
        for batch in self.dataloader:
            if self.clock.done:
                break
            self._call_callbacks(event_name="on_batch_begin")
            self.step(batch=batch)
            self._call_callbacks(event_name="on_batch_end")

    def train(self) -> None:
        self.set_models_to_mode("train")
        self._call_callbacks(event_name="on_train_begin")
        while not self.clock.done:
            self._call_callbacks(event_name="on_epoch_begin")
            self.epoch()
            self._call_callbacks(event_name="on_epoch_end")
        self._call_callbacks(event_name="on_train_end")

    def set_models_to_mode(self, mode: str) -> None:
        for item in self.models.values():
            item.model.train(mode == "train")

    def _call_callbacks(self, event_name: str) -> None:
        for callback in self.callbacks.values():
            getattr(callback, event_name)(self)


class RegressionTrainer(Trainer):
    def _load_models(self) -> None:
        config = self.config["regressor"]
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.models["regressor"] = ModelItem(name="regressor", config=config, model=model)

    @property
    def regressor(self) -> nn.Module:
        return self.models["regressor"].model

    @property
    def dataset_length(self) -> int:
        return 8

    @cached_property
    def dataset(self) -> Dataset:
        return RandomDataset(self.dataset_length)

    def compute_loss(self, batch: Any) -> Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.regressor(x), y)


if __name__ == "__main__":
    config = {
        "training": {"batch_size": 2, "duration": 12, "gradient_accumulation": 3},
        "optimizer": {"learning_rate": 1e-3},
        "regressor": {"learning_rate": 1e-3},
    }
    trainer = RegressionTrainer(config=config)
    trainer.train()
