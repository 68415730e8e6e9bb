# source: https://github.com/facebookresearch/Pearl/commit/c1896909eeccfba8c97c9a0d4f6cde1526acd858
# pattern: ContinuousSoftActorCritic.learn_batch calls super().learn_batch(), where ActorCriticBase backprops (actor_loss + critic_loss) once and steps the actor and the critic optimizers; the subclass's _actor_loss takes Q of the sampled action through self._critic, so _critic_optimizer.step() applies the actor loss's dQ/dcritic; the subclass then runs its own entropy optimizer
# case: bug
# expect: ZG006@132-134
# spread: multi
# label: reading: contributions.py shows optimizer #1 (critic) applying backward@L132, but that single backward of the summed loss is also its own critic_loss, so the tool cannot split it; run alone, _actor_loss's backward leaves nonzero .grad in self._critic (checked), and the fix commit stops the actor loss's derivative from updating the critic
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


@dataclass
class TransitionBatch:
    state: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_state: torch.Tensor
    done: torch.Tensor


def mlp_block(input_dim, hidden_dims, output_dim, last_activation=None):
    layers, last = [], input_dim
    for h in hidden_dims:
        layers += [nn.Linear(last, h), nn.ReLU()]
        last = h
    layers.append(nn.Linear(last, output_dim))
    if last_activation == "relu":
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class GaussianActorNetwork(nn.Module):
    def __init__(self, input_dim, hidden_dims, output_dim):
        super().__init__()
        self._model = mlp_block(input_dim, hidden_dims[:-1], hidden_dims[-1], last_activation="relu")
        self.fc_mu = nn.Linear(hidden_dims[-1], output_dim)
        self.fc_std = nn.Linear(hidden_dims[-1], output_dim)
        self._log_std_min, self._log_std_max = -5, 2

    def forward(self, x):
        x = self._model(x)
        mean = self.fc_mu(x)
        log_std = torch.tanh(self.fc_std(x))
        log_std = self._log_std_min + 0.5 * (self._log_std_max - self._log_std_min) * (log_std + 1)
        return mean, log_std

    def sample_action(self, state_batch, get_log_prob=False):
        epsilon = 1e-6
        mean, log_std = self.forward(state_batch)
        std = log_std.exp()
        sample = mean + std * torch.randn_like(mean)
        action = torch.tanh(sample)
        if not get_log_prob:
            return action
        log_prob = (-((sample - mean) ** 2) / (2 * std ** 2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1, keepdim=True)
        log_prob = log_prob - torch.log(1 - action.pow(2) + epsilon).sum(-1, keepdim=True)
        return action, log_prob


class VanillaQValueNetwork(nn.Module):
    def __init__(self, state_dim, action_dim, hidden_dims):
        super().__init__()
        self._model = mlp_block(state_dim + action_dim, hidden_dims, 1)

    def get_q_values(self, state_batch, action_batch):
        return self._model(torch.cat([state_batch, action_batch], dim=-1)).view(-1)


class TwinCritic(nn.Module):
    def __init__(self, state_dim, action_dim, hidden_dims):
        super().__init__()
        self._critic_1 = VanillaQValueNetwork(state_dim, action_dim, hidden_dims)
        self._critic_2 = VanillaQValueNetwork(state_dim, action_dim, hidden_dims)

    def get_q_values(self, state_batch, action_batch):
        return (self._critic_1.get_q_values(state_batch, action_batch),
                self._critic_2.get_q_values(state_batch, action_batch))


def update_target_network(target_network, source_network, tau):
    for target_param, source_param in zip(target_network.parameters(), source_network.parameters()):
        target_param.data.copy_(tau * source_param.data + (1.0 - tau) * target_param.data)


def twin_critic_action_value_loss(state_batch, action_batch, expected_target_batch, critic):
    q_1, q_2 = critic.get_q_values(state_batch, action_batch)
    return F.mse_loss(q_1, expected_target_batch) + F.mse_loss(q_2, expected_target_batch)


class PolicyLearner(nn.Module):
    def __init__(self, training_rounds, batch_size):
        super().__init__()
        self._training_rounds = training_rounds
        self.batch_size = batch_size

    def learn(self, replay_buffer):
        report = {}
        for _ in range(self._training_rounds):
            report = self.learn_batch(replay_buffer.sample(self.batch_size))
        return report


class ActorCriticBase(PolicyLearner):
    def __init__(self, state_dim, action_dim, actor_hidden_dims, critic_hidden_dims, actor_learning_rate=1e-3,
                 critic_learning_rate=1e-3, critic_soft_update_tau=0.005, discount_factor=0.99,
                 training_rounds=1, batch_size=4):
        super().__init__(training_rounds, batch_size)
        self._actor = GaussianActorNetwork(state_dim, actor_hidden_dims, action_dim)
        self._actor_optimizer = optim.AdamW(
            [{"params": self._actor.parameters(), "lr": actor_learning_rate, "amsgrad": True}])
        self._use_critic = critic_hidden_dims is not None
        self._critic = TwinCritic(state_dim, action_dim, critic_hidden_dims)
        self._critic_optimizer = optim.AdamW(
            [{"params": self._critic.parameters(), "lr": critic_learning_rate, "amsgrad": True}])
        self._critic_target = TwinCritic(state_dim, action_dim, critic_hidden_dims)
        update_target_network(self._critic_target, self._critic, 1)
        self._use_critic_target = True
        self._critic_soft_update_tau = critic_soft_update_tau
        self._discount_factor = discount_factor

    def learn_batch(self, batch):
        actor_loss = self._actor_loss(batch)
        self._actor_optimizer.zero_grad()
        if self._use_critic:
            critic_loss = self._critic_loss(batch)
            self._critic_optimizer.zero_grad()
            (actor_loss + critic_loss).backward()
            self._actor_optimizer.step()
            self._critic_optimizer.step()
            report = {"actor_loss": actor_loss.item(), "critic_loss": critic_loss.item()}
        else:
            actor_loss.backward()
            self._actor_optimizer.step()
            report = {"actor_loss": actor_loss.item()}

        if self._use_critic_target:
            update_target_network(self._critic_target, self._critic, self._critic_soft_update_tau)
        return report


class ContinuousSoftActorCritic(ActorCriticBase):
    def __init__(self, state_dim, action_dim, actor_hidden_dims, critic_hidden_dims, critic_learning_rate=1e-3,
                 entropy_coef=0.2, entropy_autotune=True, training_rounds=3, batch_size=4):
        super().__init__(state_dim, action_dim, actor_hidden_dims, critic_hidden_dims,
                         critic_learning_rate=critic_learning_rate, training_rounds=training_rounds,
                         batch_size=batch_size)
        self._entropy_autotune = entropy_autotune
        if entropy_autotune:
            self.register_parameter("_log_entropy", nn.Parameter(torch.zeros(1, requires_grad=True)))
            self._entropy_optimizer = optim.AdamW([self._log_entropy], lr=critic_learning_rate, amsgrad=True)
            self.register_buffer("_entropy_coef", torch.exp(self._log_entropy).detach())
            self.register_buffer("_target_entropy", -torch.tensor(float(action_dim)))
        else:
            self.register_buffer("_entropy_coef", torch.tensor(entropy_coef))

    def learn_batch(self, batch):
        actor_critic_loss = super().learn_batch(batch)
        state_batch = batch.state

        if self._entropy_autotune:
            with torch.no_grad():
                _, action_batch_log_prob = self._actor.sample_action(state_batch, get_log_prob=True)
            entropy_optimizer_loss = (-torch.exp(self._log_entropy) * (action_batch_log_prob + self._target_entropy)).mean()
            self._entropy_optimizer.zero_grad()
            entropy_optimizer_loss.backward()
            self._entropy_optimizer.step()
            self._entropy_coef = torch.exp(self._log_entropy).detach()
        return actor_critic_loss

    def _critic_loss(self, batch):
        expected_state_action_values = (
            self._get_next_state_expected_values(batch) * self._discount_factor * (1 - batch.done.float())
        ) + batch.reward
        return twin_critic_action_value_loss(
            state_batch=batch.state,
            action_batch=batch.action,
            expected_target_batch=expected_state_action_values,
            critic=self._critic,
        )

    @torch.no_grad()
    def _get_next_state_expected_values(self, batch):
        next_action_batch, next_action_batch_log_prob = self._actor.sample_action(batch.next_state, get_log_prob=True)
        next_q1, next_q2 = self._critic_target.get_q_values(state_batch=batch.next_state, action_batch=next_action_batch)
        next_q = torch.minimum(next_q1, next_q2)
        next_state_action_values = next_q.view(self.batch_size, 1)
        next_state_action_values = next_state_action_values - (self._entropy_coef * next_action_batch_log_prob)
        return next_state_action_values.view(-1)

    def _actor_loss(self, batch):
        action_batch, action_batch_log_prob = self._actor.sample_action(batch.state, get_log_prob=True)
        q1, q2 = self._critic.get_q_values(state_batch=batch.state, action_batch=action_batch)
        q = torch.minimum(q1, q2)
        state_action_values = q.view((self.batch_size, 1))
        loss = (self._entropy_coef * action_batch_log_prob - state_action_values).mean()
        return loss


class BasicReplayBuffer:
    def __init__(self, capacity):
        self.memory, self.capacity = [], capacity

    def push(self, state, action, reward, next_state, done):
        self.memory = (self.memory + [(state, action, reward, next_state, done)])[-self.capacity:]

    def sample(self, batch_size):
        s, a, r, s2, d = zip(*random.sample(self.memory, batch_size))
        return TransitionBatch(torch.stack(s), torch.stack(a), torch.tensor(r), torch.stack(s2), torch.tensor(d))


def online_learning(state_dim=3, action_dim=2, episodes=3, steps_per_episode=6, seed=0):
    random.seed(seed)
    torch.manual_seed(seed)
    agent = ContinuousSoftActorCritic(state_dim, action_dim, actor_hidden_dims=[8, 8], critic_hidden_dims=[8])
    replay_buffer = BasicReplayBuffer(capacity=64)
    for _ in range(episodes):
        state = torch.randn(state_dim)
        for _ in range(steps_per_episode):
            with torch.no_grad():
                action = agent._actor.sample_action(state.unsqueeze(0))[0]
            next_state = torch.randn(state_dim)
            replay_buffer.push(state, action, float(torch.randn(())), next_state, False)
            state = next_state
        agent.learn(replay_buffer)


if __name__ == "__main__":
    online_learning()
