"""ParlAI's TorchAgent, reduced: backward() advances the accumulation counter
(`(n + 1) % update_freq`), zero_grad() and update_params() act only where it is 0, which is
correct accumulation. The analysis does not follow a counter assigned in one method and tested
in two others."""
import torch


class Agent:
    def __init__(self, model, update_freq):
        self.model = model
        self.update_freq = update_freq
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self._number_grad_accum = 0

    def backward(self, loss):
        if self.update_freq > 1:
            loss = loss / self.update_freq
            self._number_grad_accum = (self._number_grad_accum + 1) % self.update_freq
        loss.backward()

    def update_params(self):
        if self.update_freq > 1:
            if self._number_grad_accum != 0:
                return
        self.optimizer.step()

    def zero_grad(self):
        if self._number_grad_accum != 0:
            return
        self.optimizer.zero_grad()

    def train_step(self, batch):
        self.zero_grad()
        try:
            loss = self.model(batch).sum()
            self.backward(loss)
            self.update_params()
        except RuntimeError:
            pass


if __name__ == "__main__":
    torch.manual_seed(0)
    agent = Agent(torch.nn.Linear(3, 1), 2)
    for batch in [torch.randn(4, 3) for _ in range(4)]:
        agent.train_step(batch)  # gap: ZG004
