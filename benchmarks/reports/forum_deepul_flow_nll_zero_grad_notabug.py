# source: https://github.com/rll/deepul/issues/12
# pattern: lecture demo flow model: train() per epoch computes loss = model.nll(x) first, then optimizer.zero_grad(), backward, step; asked whether clearing after the loss is wrong: it is not (the clear only has to precede backward)
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean (each step applies only its own batch's nll backward)
import math

import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data
from torch.distributions import Normal, Uniform


class MixtureCDFFlow(nn.Module):
    def __init__(self, base_dist='uniform', n_components=4):
        super().__init__()
        self.composition = False
        if base_dist == 'uniform':
            self.base_dist = Uniform(torch.tensor(0.0), torch.tensor(1.0))
        else:
            self.base_dist = Normal(torch.tensor(0.0), torch.tensor(1.0))
        self.loc = nn.Parameter(torch.randn(n_components), requires_grad=True)
        self.log_scale = nn.Parameter(torch.zeros(n_components), requires_grad=True)
        self.weight_logits = nn.Parameter(torch.zeros(n_components), requires_grad=True)
        self.n_components = n_components

    def flow(self, x):
        # z = cdf of the mixture, log|dz/dx| = log of the mixture density
        x = x.unsqueeze(1).repeat(1, self.n_components)
        weights = self.weight_logits.softmax(dim=0).unsqueeze(0).repeat(x.shape[0], 1)
        dist = Normal(self.loc, self.log_scale.exp())
        z = (dist.cdf(x) * weights).sum(dim=1)
        log_det = (dist.log_prob(x).exp() * weights).sum(dim=1).log()
        return z, log_det

    def log_prob(self, x):
        z, log_det = self.flow(x)
        return self.base_dist.log_prob(z.clamp(1e-5, 1 - 1e-5)) + log_det

    def nll(self, x):
        return -self.log_prob(x).mean()


def train(model, train_loader, optimizer):
    model.train()
    for x in train_loader:
        x = x.float()
        loss = model.nll(x)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def eval_loss(model, data_loader):
    model.eval()
    total_loss = 0
    with torch.no_grad():
        for x in data_loader:
            x = x.float()
            loss = model.nll(x)
            total_loss += loss * x.shape[0]
        avg_loss = total_loss / len(data_loader.dataset)
    return avg_loss.item()


def train_epochs(model, train_loader, test_loader, train_args):
    epochs, lr = train_args['epochs'], train_args['lr']
    optimizer = optim.Adam(model.parameters(), lr=lr)
    train_losses, test_losses = [], [eval_loss(model, test_loader)]
    for epoch in range(epochs):
        model.train()
        train(model, train_loader, optimizer)
        train_losses.append(eval_loss(model, train_loader))
        test_losses.append(eval_loss(model, test_loader))
    return train_losses, test_losses


class NumpyDataset(data.Dataset):
    def __init__(self, array):
        super().__init__()
        self.array = array

    def __len__(self):
        return len(self.array)

    def __getitem__(self, index):
        return self.array[index]


def generate_1d_flow_data(n):
    gaussian1 = torch.randn(n) * 0.5 - 1.0
    gaussian2 = torch.randn(n) * 0.3 + 0.5
    return torch.cat([gaussian1, gaussian2])


if __name__ == '__main__':
    torch.manual_seed(0)
    train_data = NumpyDataset(generate_1d_flow_data(40))
    test_data = NumpyDataset(generate_1d_flow_data(10))
    train_loader = data.DataLoader(train_data, batch_size=16, shuffle=True)
    test_loader = data.DataLoader(test_data, batch_size=16, shuffle=False)
    flow = MixtureCDFFlow(base_dist='uniform', n_components=4)
    train_losses, test_losses = train_epochs(flow, train_loader, test_loader, dict(epochs=3, lr=5e-3))
    print(train_losses[-1], test_losses[-1], math.isfinite(test_losses[-1]))
