# source: https://github.com/seungeunrho/minimalRL/issues/26
# pattern: the fix for the per-step update: Policy.train_net clears its own optimizer once, backprops every step's -log(prob)*R of the episode into the same .grad, and steps once after the loop; main() calls it once per episode (a toy env stands in for gym's CartPole)
# case: trap
# expect: clean
# spread: single
# label: oracle.py: no violation (each step applies exactly one episode's backwards, cleared before the next episode)
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

# Hyperparameters
learning_rate = 0.0002
gamma = 0.98


class ToyCartPole:
    def __init__(self, seed=0, max_steps=5):
        self.gen = torch.Generator().manual_seed(seed)
        self.max_steps, self.t = max_steps, 0

    def reset(self):
        self.t = 0
        return torch.randn(4, generator=self.gen), {}

    def step(self, a):
        self.t += 1
        done = self.t >= self.max_steps or bool(torch.rand((), generator=self.gen) < 0.1)
        return torch.randn(4, generator=self.gen), 1.0, done, False, {}

    def close(self):
        pass


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.data = []

        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 2)
        self.optimizer = optim.Adam(self.parameters(), lr=learning_rate)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.softmax(self.fc2(x), dim=0)
        return x

    def put_data(self, item):
        self.data.append(item)

    def train_net(self):
        R = 0
        self.optimizer.zero_grad()
        for r, prob in self.data[::-1]:
            R = r + gamma * R
            loss = -torch.log(prob) * R
            loss.backward()
        self.optimizer.step()
        self.data = []


def main():
    env = ToyCartPole()
    pi = Policy()
    score = 0.0
    print_interval = 2

    for n_epi in range(6):
        s, _ = env.reset()
        done = False

        while not done:
            prob = pi(s)
            m = Categorical(prob)
            a = m.sample()
            s_prime, r, done, truncated, info = env.step(a.item())
            pi.put_data((r, prob[a]))
            s = s_prime
            score += r

        pi.train_net()

        if n_epi % print_interval == 0 and n_epi != 0:
            score = 0.0
    env.close()


if __name__ == '__main__':
    main()
