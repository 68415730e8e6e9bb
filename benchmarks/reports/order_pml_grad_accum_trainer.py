# source: https://github.com/KevinMusgrave/pytorch-metric-learning/issues/327
# pattern: gradient accumulation suggested as a MetricLossOnly subclass: forward_and_backward() runs self.backward() every iteration but calls the trainer's self.zero_grad() helper (models' and optimizers' zero_grad) inside the every-k branch right before self.step_optimizers(), so each step applies gradients that were just wiped (library trainer classes written as a small stand-in)
# case: bug
# expect: ZG002@178-179
# spread: multi
# label: oracle.py: EMPTY at every step (the accumulated gradients are cleared just before step_optimizers)
import torch
import torch.nn as nn
import torch.nn.functional as F


def return_input(x):
    return x


class LossTracker:
    def __init__(self, loss_names):
        if "total_loss" not in loss_names:
            loss_names.append("total_loss")
        self.losses = {key: 0 for key in loss_names}
        self.loss_weights = {key: 1 for key in loss_names}

    def update(self, loss_weight_dict):
        for k in self.losses:
            self.loss_weights[k] = loss_weight_dict.get(k, 1.0)
        for k in self.losses:
            if k != "total_loss":
                self.losses[k] = self.losses[k] * self.loss_weights[k]
        self.losses["total_loss"] = 0
        for k, v in self.losses.items():
            if k != "total_loss":
                self.losses["total_loss"] = self.losses["total_loss"] + v


class ContrastiveLoss(nn.Module):
    # stand-in for the library's pair-based loss: pull positives, push negatives past a margin
    def __init__(self, pos_margin=0.0, neg_margin=1.0):
        super().__init__()
        self.pos_margin = pos_margin
        self.neg_margin = neg_margin

    def forward(self, embeddings, labels, indices_tuple=None):
        emb = F.normalize(embeddings, dim=1)
        dist = torch.cdist(emb, emb)
        same = labels[:, None] == labels[None, :]
        eye = torch.eye(len(labels), dtype=torch.bool)
        pos = F.relu(dist - self.pos_margin)[same & ~eye]
        neg = F.relu(self.neg_margin - dist)[~same]
        return pos.mean() + neg.mean()


class BaseTrainer:
    def __init__(self, models, optimizers, batch_size, loss_funcs, mining_funcs, dataset,
                 iterations_per_epoch=None, loss_weights=None, gradient_clippers=None,
                 freeze_these=(), end_of_iteration_hook=None, end_of_epoch_hook=None):
        self.models = models
        self.optimizers = optimizers
        self.batch_size = batch_size
        self.loss_funcs = loss_funcs
        self.mining_funcs = mining_funcs
        self.dataset = dataset
        self.iterations_per_epoch = iterations_per_epoch
        self.loss_weights = loss_weights
        self.gradient_clippers = gradient_clippers
        self.freeze_these = freeze_these
        self.end_of_iteration_hook = end_of_iteration_hook or return_input
        self.end_of_epoch_hook = end_of_epoch_hook or return_input
        self.loss_names = list(self.loss_funcs.keys())
        self.custom_setup()
        self.initialize_loss_tracker()
        self.initialize_loss_weights()

    def custom_setup(self):
        pass

    def initialize_loss_tracker(self):
        self.loss_tracker = LossTracker(self.loss_names)
        self.losses = self.loss_tracker.losses

    def initialize_loss_weights(self):
        if self.loss_weights is None:
            self.loss_weights = {k: 1 for k in self.loss_names}

    def update_loss_weights(self):
        pass

    def train(self, start_epoch=1, num_epochs=1):
        self.initialize_dataloader()
        for self.epoch in range(start_epoch, num_epochs + 1):
            self.set_to_train()
            for self.iteration in range(self.iterations_per_epoch):
                self.forward_and_backward()
                self.end_of_iteration_hook(self)
            self.zero_losses()
            if self.end_of_epoch_hook(self) is False:
                break

    def initialize_dataloader(self):
        data, labels = self.dataset
        self.batches = [(data[i:i + self.batch_size], labels[i:i + self.batch_size])
                        for i in range(0, len(data), self.batch_size)]
        if not self.iterations_per_epoch:
            self.iterations_per_epoch = len(self.batches)
        self.batch_index = 0

    def forward_and_backward(self):
        self.zero_losses()
        self.zero_grad()
        self.update_loss_weights()
        self.calculate_loss(self.get_batch())
        self.loss_tracker.update(self.loss_weights)
        self.backward()
        self.clip_gradients()
        self.step_optimizers()

    def zero_losses(self):
        for k in self.losses.keys():
            self.losses[k] = 0

    def zero_grad(self):
        for v in self.models.values():
            v.zero_grad()
        for v in self.optimizers.values():
            v.zero_grad()

    def get_batch(self):
        batch = self.batches[self.batch_index % len(self.batches)]
        self.batch_index += 1
        return batch

    def compute_embeddings(self, data):
        return self.models["embedder"](self.models["trunk"](data))

    def maybe_mine_embeddings(self, embeddings, labels):
        if "tuple_miner" in self.mining_funcs:
            return self.mining_funcs["tuple_miner"](embeddings, labels)
        return None

    def backward(self):
        self.losses["total_loss"].backward()

    def step_optimizers(self):
        for k, v in self.optimizers.items():
            if k.replace("_optimizer", "") not in self.freeze_these:
                v.step()

    def clip_gradients(self):
        if self.gradient_clippers is not None:
            for v in self.gradient_clippers.values():
                v()

    def set_to_train(self):
        for v in self.models.values():
            v.train()


class MetricLossOnly(BaseTrainer):
    def calculate_loss(self, curr_batch):
        data, labels = curr_batch
        embeddings = self.compute_embeddings(data)
        indices_tuple = self.maybe_mine_embeddings(embeddings, labels)
        self.losses["metric_loss"] = self.loss_funcs["metric_loss"](embeddings, labels, indices_tuple)


class TrainerGradientAccumulation(MetricLossOnly):
    def __init__(self, *args, accumulation_steps=10, **kwargs):
        super().__init__(*args, **kwargs)
        self.accumulation_steps = accumulation_steps

    def forward_and_backward(self):
        self.zero_losses()
        self.update_loss_weights()
        self.calculate_loss(self.get_batch())
        self.loss_tracker.update(self.loss_weights)
        self.backward()
        self.clip_gradients()
        if (self.iteration + 1) % self.accumulation_steps == 0:
            self.zero_grad()
            self.step_optimizers()


def main():
    torch.manual_seed(0)
    trunk = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    embedder = nn.Linear(16, 4)
    models = {"trunk": trunk, "embedder": embedder}
    optimizers = {
        "trunk_optimizer": torch.optim.SGD(trunk.parameters(), lr=0.1),
        "embedder_optimizer": torch.optim.SGD(embedder.parameters(), lr=0.1),
    }
    data = torch.randn(24, 8)
    labels = torch.arange(24) % 3
    trainer = TrainerGradientAccumulation(
        models, optimizers, batch_size=4, loss_funcs={"metric_loss": ContrastiveLoss()},
        mining_funcs={}, dataset=(data, labels), accumulation_steps=3)
    trainer.train(num_epochs=2)


if __name__ == "__main__":
    main()
