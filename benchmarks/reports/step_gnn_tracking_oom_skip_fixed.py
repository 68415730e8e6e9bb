# source: https://github.com/gnn-tracking/gnn_tracking/issues/281
# pattern: TCNTrainer.train_step's batch loop wraps evaluate_model, get_batch_losses, the clear, backward and step in a try whose OOM except counts the error and `continue`s to the next batch (aborting after 10 in a row: the fix for #281); the clear sits in the try right before the backward, so a skipped batch never leaks gradients into the next step
# case: trap
# expect: clean
# spread: single
# label: oracle.py: no violation (the oversized graph raises an out-of-memory error before its backward; every step applies one batch)
import collections
from collections.abc import Mapping
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Adam


class Data:
    def __init__(self, x, edge_index, y, particle_id):
        self.x = x
        self.edge_index = edge_index
        self.y = y
        self.particle_id = particle_id

    def to(self, device):
        return self


class GraphTCN(nn.Module):
    """Edge classifier + condensation head (stand-in for the message-passing TCN)."""

    def __init__(self, node_indim, edge_hidden, h_outdim, max_nodes):
        super().__init__()
        self.node_enc = nn.Linear(node_indim, edge_hidden)
        self.edge_clf = nn.Linear(2 * edge_hidden, 1)
        self.h_out = nn.Linear(edge_hidden, h_outdim)
        self.beta_out = nn.Linear(edge_hidden, 1)
        self.max_nodes = max_nodes

    def forward(self, data):
        if data.x.shape[0] > self.max_nodes:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        h = torch.relu(self.node_enc(data.x))
        src, dst = data.edge_index
        w = torch.sigmoid(self.edge_clf(torch.cat([h[src], h[dst]], dim=1)))
        return {"W": w, "H": self.h_out(h), "B": torch.sigmoid(self.beta_out(h))}


class EdgeWeightBCELoss(nn.Module):
    def forward(self, *, w, y, **kwargs):
        return F.binary_cross_entropy(w, y.float())


class PotentialLoss(nn.Module):
    def __init__(self, q_min=0.01):
        super().__init__()
        self.q_min = q_min

    def forward(self, *, x, beta, particle_id, **kwargs):
        q = torch.arctanh(beta.clamp(max=0.99)) ** 2 + self.q_min
        same = (particle_id[:, None] == particle_id[None, :]).float()
        dist = torch.cdist(x, x)
        attractive = (same * dist ** 2 * q[:, None] * q[None, :]).mean()
        repulsive = ((1 - same) * F.relu(1 - dist) * q[:, None] * q[None, :]).mean()
        return {"attractive": attractive, "repulsive": repulsive}


class ConstantLossWeights:
    def __init__(self, loss_weights=None):
        self._loss_weights = loss_weights or {}

    def __getitem__(self, key):
        return self._loss_weights.get(key, 1.0)

    def step(self, losses):
        pass


class TCNTrainer:
    def __init__(self, model, loaders, loss_functions, *, lr=5e-4,
                 optimizer: Callable = Adam, loss_weights=None):
        self.model = model
        self.train_loader = loaders["train"]
        self.loss_functions = loss_functions
        self._loss_weight_setter = ConstantLossWeights(loss_weights=loss_weights)
        self.optimizer = optimizer(self.model.parameters(), lr=lr)
        self._epoch = 0
        self._batch_hooks = []
        self.train_loss = []

    def evaluate_model(self, data, apply_truth_cuts=False):
        out = self.model(data)
        return {
            "w": out["W"].squeeze(),
            "x": out["H"],
            "beta": out["B"].squeeze(),
            "y": data.y,
            "particle_id": data.particle_id,
        }

    def get_batch_losses(self, model_output):
        individual_losses = {}
        for key, loss_func in self.loss_functions.items():
            loss = loss_func(**model_output)
            if isinstance(loss, Mapping):
                for k, v in loss.items():
                    individual_losses[f"{key}_{k}"] = v
            else:
                individual_losses[key] = loss
        total = sum(self._loss_weight_setter[k] * individual_losses[k] for k in individual_losses)
        if torch.isnan(total):
            raise RuntimeError("NaN loss encountered in test step")
        return total, individual_losses

    def train_step(self, *, max_batches=None):
        self.model.train()
        _losses = collections.defaultdict(list)
        n_oom_errors_in_a_row = 0
        for batch_idx, data in enumerate(self.train_loader):
            if max_batches and batch_idx > max_batches:
                break
            try:
                model_output = self.evaluate_model(data, apply_truth_cuts=True)
                batch_loss, batch_losses = self.get_batch_losses(model_output)
                self.optimizer.zero_grad(set_to_none=True)
                batch_loss.backward()
                self.optimizer.step()
            except RuntimeError as e:
                if "out of memory" in str(e).casefold():
                    n_oom_errors_in_a_row += 1
                    print("WARNING: ran out of memory (OOM), skipping batch. "
                          "Will abort if we get 10 consecutive OOM errors.")
                    if n_oom_errors_in_a_row > 10:
                        raise
                    continue
                raise
            else:
                n_oom_errors_in_a_row = 0

            for hook in self._batch_hooks:
                hook(self, self._epoch, batch_idx, model_output, data)
            _losses["total"].append(batch_loss.item())
            for key, loss in batch_losses.items():
                _losses[key].append(loss.item())
        losses = {k: sum(v) / len(v) for k, v in _losses.items()}
        self._loss_weight_setter.step(losses)
        self.train_loss.append(losses)
        return losses

    def step(self, *, max_batches=None):
        self._epoch += 1
        results = self.train_step(max_batches=max_batches)
        print(f"Results {self._epoch}: total={results['total']:.4f}")
        return results

    def train(self, epochs=1000, max_batches=None):
        for _ in range(1, epochs + 1):
            self.step(max_batches=max_batches)


def make_graph(n_nodes, n_edges=12, n_particles=3, node_indim=4):
    return Data(
        x=torch.randn(n_nodes, node_indim),
        edge_index=torch.randint(0, n_nodes, (2, n_edges)),
        y=torch.randint(0, 2, (n_edges,)),
        particle_id=torch.randint(0, n_particles, (n_nodes,)),
    )


if __name__ == "__main__":
    torch.manual_seed(0)
    # the third graph is oversized: its forward runs out of memory
    loaders = {"train": [make_graph(n) for n in (8, 10, 64, 9, 7)]}
    model = GraphTCN(node_indim=4, edge_hidden=6, h_outdim=2, max_nodes=32)
    trainer = TCNTrainer(
        model, loaders,
        loss_functions={"edge": EdgeWeightBCELoss(), "potential": PotentialLoss()},
        loss_weights={"edge": 5.0},
    )
    trainer.train(epochs=3)
