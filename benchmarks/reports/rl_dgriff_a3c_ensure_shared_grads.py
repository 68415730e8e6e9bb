# source: https://github.com/dgriff777/rl_a3c_pytorch/issues/25
# pattern: A3C worker clears only its local player.model, then ensure_shared_grads aliases shared_param._grad = param.grad once and returns early whenever the shared grad is set; the shared optimizer is never cleared. The maintainer answered the early return is fine (it was, while zero_grad zeroed in place), but since torch 2.0 player.model.zero_grad() sets the local grads to None, so the alias keeps the first update's tensor and every later optimizer.step() applies it again (CPU path; workers run in turn in-process instead of torch.multiprocessing)
# case: bug
# expect: ZG001@177-180
# spread: multi
# label: reading: oracle.py sees no violation (the shared params get .grad by assignment, not from a backward); an instrumented run shows that from each worker's second update on, the .grad tensors the shared optimizer steps on are the first update's, not the ones loss.backward() (L178) just wrote into player.model, and the shared optimizer (L180) is never cleared
import argparse
import math
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


def ensure_shared_grads(model, shared_model, gpu=False):
    for param, shared_param in zip(model.parameters(), shared_model.parameters()):
        if shared_param.grad is not None and not gpu:
            return
        elif not gpu:
            shared_param._grad = param.grad
        else:
            shared_param._grad = param.grad.cpu()


class SharedRMSprop(optim.Optimizer):
    """RMSprop whose state would be shared across processes."""

    def __init__(self, params, lr=7e-4, alpha=0.99, eps=0.1, weight_decay=0):
        defaults = defaultdict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)
        super(SharedRMSprop, self).__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"] = torch.zeros(1)
                state["square_avg"] = p.data.new().resize_as_(p.data).zero_()

    def share_memory(self):
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["square_avg"].share_memory_()
                state["step"].share_memory_()

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]
                square_avg = state["square_avg"]
                alpha = group["alpha"]
                state["step"] += 1
                if group["weight_decay"] != 0:
                    grad = grad.add(p, alpha=group["weight_decay"])
                square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                avg = square_avg.sqrt().add_(group["eps"])
                p.data.addcdiv_(grad, avg, value=-group["lr"])
        return loss


class A3Clstm(nn.Module):
    def __init__(self, num_inputs, num_actions, args):
        super(A3Clstm, self).__init__()
        self.conv1 = nn.Linear(num_inputs, 16)
        self.lstm = nn.LSTMCell(16, args.hidden_size)
        self.critic_linear = nn.Linear(args.hidden_size, 1)
        self.actor_linear = nn.Linear(args.hidden_size, num_actions)

    def forward(self, x, hx, cx):
        x = F.relu(self.conv1(x))
        hx, cx = self.lstm(x, (hx, cx))
        return self.critic_linear(hx), self.actor_linear(hx), hx, cx


class ToyAtariEnv:  # stands in for the wrapped Atari env
    def __init__(self, seed, obs_dim=6, n_actions=3):
        self.gen = torch.Generator().manual_seed(seed)
        self.obs_dim, self.n_actions, self.t = obs_dim, n_actions, 0

    def reset(self):
        self.t = 0
        return torch.rand(self.obs_dim, generator=self.gen)

    def step(self, action):
        self.t += 1
        reward = float(torch.rand((), generator=self.gen) > 0.7)
        return torch.rand(self.obs_dim, generator=self.gen), reward, self.t >= 7, {}


class Agent(object):
    def __init__(self, model, env, args, state):
        self.model = model
        self.env = env
        self.state = state
        self.hx = None
        self.cx = None
        self.eps_len = 0
        self.args = args
        self.values = []
        self.log_probs = []
        self.rewards = []
        self.entropies = []
        self.done = True
        self.reward = 0

    def action_train(self):
        value, logit, self.hx, self.cx = self.model(self.state.unsqueeze(0), self.hx, self.cx)
        prob = F.softmax(logit, dim=1)
        log_prob = F.log_softmax(logit, dim=1)
        entropy = -(log_prob * prob).sum(1)
        self.entropies.append(entropy)
        action = prob.multinomial(1).data
        log_prob = log_prob.gather(1, action)
        self.state, self.reward, self.done, _ = self.env.step(action.item())
        self.eps_len += 1
        self.reward = max(min(self.reward, 1), -1)
        self.values.append(value)
        self.log_probs.append(log_prob)
        self.rewards.append(self.reward)
        return self

    def clear_actions(self):
        self.values = []
        self.log_probs = []
        self.rewards = []
        self.entropies = []
        return self


def train(rank, args, shared_model, optimizer):
    torch.manual_seed(args.seed + rank)
    hidden_size = args.hidden_size
    env = ToyAtariEnv(args.seed + rank)
    player = Agent(None, env, args, None)
    player.model = A3Clstm(env.obs_dim, env.n_actions, args)
    player.state = player.env.reset()
    player.model.train()
    for _ in range(args.updates_per_worker):
        player.model.load_state_dict(shared_model.state_dict())
        if player.done:
            player.cx = torch.zeros(1, hidden_size)
            player.hx = torch.zeros(1, hidden_size)
        else:
            player.cx = player.cx.data
            player.hx = player.hx.data
        for step in range(args.num_steps):
            player.action_train()
            if player.done:
                break

        if player.done:
            player.eps_len = 0
            player.state = player.env.reset()

        R = torch.zeros(1, 1)
        gae = torch.zeros(1, 1)
        if not player.done:
            value, _, _, _ = player.model(player.state.unsqueeze(0), player.hx, player.cx)
            R = value.detach()
        player.values.append(R)
        policy_loss = 0
        value_loss = 0
        for i in reversed(range(len(player.rewards))):
            R = args.gamma * R + player.rewards[i]
            advantage = R - player.values[i]
            value_loss = value_loss + 0.5 * advantage.pow(2)
            delta_t = player.rewards[i] + args.gamma * player.values[i + 1].data - player.values[i].data
            gae = gae * args.gamma * args.tau + delta_t
            policy_loss = policy_loss - (player.log_probs[i] * gae) - (args.entropy_coef * player.entropies[i])

        player.model.zero_grad()
        (policy_loss + 0.5 * value_loss).backward()
        ensure_shared_grads(player.model, shared_model, gpu=False)
        optimizer.step()
        player.clear_actions()


if __name__ == "__main__":
    args = argparse.Namespace(lr=1e-4, gamma=0.99, tau=1.0, entropy_coef=0.01, seed=1, workers=1,
                              num_steps=4, hidden_size=8, updates_per_worker=6)
    torch.manual_seed(args.seed)
    shared_model = A3Clstm(6, 3, args)
    shared_model.share_memory()
    optimizer = SharedRMSprop(shared_model.parameters(), lr=args.lr)
    optimizer.share_memory()
    for rank in range(args.workers):  # mp.Process(target=train, ...) in the original; here in turn
        train(rank, args, shared_model, optimizer)
