"""Two objects trained in turn, each with its own model and optimizer built in its constructor:
the second one's loop clears only after its step, so the analysis, which cannot tell that the
two optimizers hold different parameters, reads the first one's backward as a gradient left
before the second loop (rules.md v3 LEAK). The oracle finds nothing: the first object's window
ends with its step and clear, and the second's parameters never had a gradient."""
import torch


class Counted:
    def __init__(self, model, k):
        self.model, self.k = model, k
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        self.n = 0

    def step(self, batch):
        self.model(batch).pow(2).mean().backward()
        if (self.n + 1) % self.k == 0:
            self.opt.step()
            self.opt.zero_grad()
        self.n += 1

    def fit(self, loader):
        for batch in loader:
            self.step(batch)


class Distiller:
    def __init__(self, model, k):
        self.model, self.k = model, k
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.n_iter = 0

    def optimize(self, loss):
        loss.backward()
        self.n_iter += 1
        if self.n_iter % self.k == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()

    def train(self, loader):
        for batch in loader:
            self.optimize(self.model(batch).pow(2).mean())


def main(data):
    counted = Counted(torch.nn.Linear(3, 1), 2)
    counted.fit(data)
    distiller = Distiller(torch.nn.Linear(3, 1), 2)
    distiller.train(data)  # gap: ZG001


if __name__ == "__main__":
    torch.manual_seed(0)
    main([torch.randn(4, 3) for _ in range(6)])
