# source: https://github.com/greydanus/baby-a3c/issues/3
# pattern: A3C worker clears only shared_optimizer (over shared_model) and aliases shared_param._grad = param.grad of its local model when the shared grad is None; since torch 2.0 zero_grad() sets the shared grads to None instead of zeroing the aliased tensor, so the local model's .grad is never cleared and every step applies the sum of all the worker's earlier backwards (workers run in turn in-process instead of torch.multiprocessing)
# case: bug
# expect: ZG001@137-142
# spread: multi
# label: reading: oracle.py sees no violation (the shared params get .grad by assignment, not from a backward); an instrumented run shows that from each worker's second update on, the local model's .grad still holds the earlier updates' gradients when loss.backward() (L137) adds to it, and that aliased tensor is what shared_optimizer.step() (L142) applies
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args():
    parser = argparse.ArgumentParser(description=None)
    parser.add_argument('--processes', default=2, type=int, help='number of workers to train with')
    parser.add_argument('--rnn_steps', default=4, type=int, help='steps to train the GRU over')
    parser.add_argument('--lr', default=1e-4, type=float, help='learning rate')
    parser.add_argument('--seed', default=1, type=int, help='seed random # generators')
    parser.add_argument('--gamma', default=0.99, type=float, help='rewards discount factor')
    parser.add_argument('--tau', default=1.0, type=float, help='generalized advantage estimation discount')
    parser.add_argument('--horizon', default=0.99, type=float, help='horizon for running averages')
    parser.add_argument('--hidden', default=8, type=int, help='hidden size of GRU')
    parser.add_argument('--max_frames', default=20, type=int, help='frames per worker')
    return parser.parse_args([])


def discount(x, gamma):  # discounted sums, back to front
    out, running = [], 0.0
    for v in reversed(list(x)):
        running = float(v) + gamma * running
        out.append(running)
    return torch.tensor(out[::-1], dtype=torch.float32)


class ToyEnv:  # stands in for the gym Atari env
    def __init__(self, seed, obs_size=16, num_actions=3):
        self.gen = torch.Generator().manual_seed(seed)
        self.obs_size, self.num_actions, self.t = obs_size, num_actions, 0

    def reset(self):
        self.t = 0
        return torch.rand(self.obs_size, generator=self.gen)

    def step(self, action):
        self.t += 1
        reward = float(torch.rand((), generator=self.gen) > 0.5)
        return torch.rand(self.obs_size, generator=self.gen), reward, self.t >= 6, {}


class NNPolicy(nn.Module):  # an actor-critic neural network
    def __init__(self, channels, memsize, num_actions):
        super(NNPolicy, self).__init__()
        self.conv1 = nn.Linear(channels * 16, 16)
        self.conv2 = nn.Linear(16, 16)
        self.gru = nn.GRUCell(16, memsize)
        self.critic_linear, self.actor_linear = nn.Linear(memsize, 1), nn.Linear(memsize, num_actions)

    def forward(self, inputs, train=True, hard=False):
        inputs, hx = inputs
        x = F.elu(self.conv1(inputs))
        x = F.elu(self.conv2(x))
        hx = self.gru(x.view(-1, 16), (hx))
        return self.critic_linear(hx), self.actor_linear(hx), hx


class SharedAdam(torch.optim.Adam):  # a pytorch optimizer whose state would be shared across processes
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0):
        super(SharedAdam, self).__init__(params, lr, betas, eps, weight_decay)
        for group in self.param_groups:
            for p in group['params']:
                state = self.state[p]
                state['step'] = torch.zeros(())
                state['exp_avg'] = torch.zeros_like(p.data).share_memory_()
                state['exp_avg_sq'] = torch.zeros_like(p.data).share_memory_()


def cost_func(args, values, logps, actions, rewards):
    np_values = values.view(-1).data

    # generalized advantage estimation using delta_t residuals
    delta_t = torch.tensor(rewards) + args.gamma * np_values[1:] - np_values[:-1]
    logpys = logps.gather(1, actions.view(-1, 1))
    gen_adv_est = discount(delta_t, args.gamma * args.tau)
    policy_loss = -(logpys.view(-1) * gen_adv_est).sum()

    # l2 loss over value estimator
    rewards[-1] += args.gamma * float(np_values[-1])
    discounted_r = discount(rewards, args.gamma)
    value_loss = .5 * (discounted_r - values[:-1, 0]).pow(2).sum()

    entropy_loss = (-logps * torch.exp(logps)).sum()
    return policy_loss + 0.5 * value_loss - 0.01 * entropy_loss


def train(shared_model, shared_optimizer, rank, args, info):
    env = ToyEnv(args.seed + rank)
    torch.manual_seed(args.seed + rank)
    model = NNPolicy(channels=1, memsize=args.hidden, num_actions=args.num_actions)  # a local/unshared model
    state = env.reset()
    episode_length, epr, eploss, done, frames = 0, 0, 0, True, 0

    while frames < args.max_frames:
        model.load_state_dict(shared_model.state_dict())  # sync with shared model

        hx = torch.zeros(1, args.hidden) if done else hx.detach()
        values, logps, actions, rewards = [], [], [], []

        for step in range(args.rnn_steps):
            episode_length += 1
            value, logit, hx = model((state.view(1, 16), hx))
            logp = F.log_softmax(logit, dim=-1)

            action = torch.exp(logp).multinomial(num_samples=1).data[0]
            state, reward, done, _ = env.step(action.item())
            epr += reward
            reward = max(-1.0, min(1.0, reward))
            frames += 1
            info['frames'].add_(1)

            if done:
                info['episodes'] += 1
                interp = 1 if info['episodes'][0] == 1 else 1 - args.horizon
                info['run_epr'].mul_(1 - interp).add_(interp * epr)
                info['run_loss'].mul_(1 - interp).add_(interp * eploss)
                episode_length, epr, eploss = 0, 0, 0
                state = env.reset()

            values.append(value) ; logps.append(logp) ; actions.append(action) ; rewards.append(reward)

        next_value = torch.zeros(1, 1) if done else model((state.view(1, 16), hx))[0]
        values.append(next_value.detach())

        loss = cost_func(args, torch.cat(values), torch.cat(logps), torch.cat(actions), list(rewards))
        eploss += loss.item()
        shared_optimizer.zero_grad() ; loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 40)

        for param, shared_param in zip(model.parameters(), shared_model.parameters()):
            if shared_param.grad is None: shared_param._grad = param.grad  # sync gradients with shared model
        shared_optimizer.step()


if __name__ == "__main__":
    args = get_args()
    args.num_actions = 3

    torch.manual_seed(args.seed)
    shared_model = NNPolicy(channels=1, memsize=args.hidden, num_actions=args.num_actions).share_memory()
    shared_optimizer = SharedAdam(shared_model.parameters(), lr=args.lr)

    info = {k: torch.DoubleTensor([0]).share_memory_() for k in ['run_epr', 'run_loss', 'episodes', 'frames']}
    for rank in range(args.processes):  # mp.Process(target=train, ...) in the original; here in turn
        train(shared_model, shared_optimizer, rank, args, info)
