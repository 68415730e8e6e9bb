# source: https://github.com/facebookresearch/Pearl/commit/c1896909eeccfba8c97c9a0d4f6cde1526acd858
# pattern: the commit's fix: the actor loss backprops first (retain_graph), then _critic_optimizer.zero_grad() wipes its dQ/dcritic before critic_loss's own backward; both optimizers step afterwards
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: optimizer #0 (actor) applies only backward@L163 (actor loss), optimizer #1 (critic) only backward@L168 (critic loss)
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


class BasicReplayBuffer:
    def __init__(self, capacity):
        self.memory = []
        self.capacity = capacity

    def push(self, state, action, reward, next_state, done):
        self.memory.append((state, action, reward, next_state, done))
        self.memory = self.memory[-self.capacity:]

    def sample(self, batch_size):
        rows = random.sample(self.memory, batch_size)
        s, a, r, s2, d = zip(*rows)
        return TransitionBatch(torch.stack(s), torch.stack(a), torch.tensor(r), torch.stack(s2), torch.tensor(d))


def mlp_block(input_dim, hidden_dims, output_dim):
    layers, last = [], input_dim
    for h in hidden_dims:
        layers += [nn.Linear(last, h), nn.ReLU()]
        last = h
    layers.append(nn.Linear(last, output_dim))
    return nn.Sequential(*layers)


class VanillaContinuousActorNetwork(nn.Module):
    def __init__(self, input_dim, hidden_dims, output_dim):
        super().__init__()
        self._model = mlp_block(input_dim, hidden_dims, output_dim)

    def forward(self, x):
        return torch.tanh(self._model(x))

    def sample_action(self, x):
        return self.forward(x)


class VanillaQValueNetwork(nn.Module):
    def __init__(self, state_dim, action_dim, hidden_dims):
        super().__init__()
        self._model = mlp_block(state_dim + action_dim, hidden_dims, 1)

    def get_q_values(self, state_batch, action_batch):
        return self._model(torch.cat([state_batch, action_batch], dim=-1)).view(-1)


class TwinCritic(nn.Module):
    def __init__(self, state_dim, action_dim, hidden_dims, network_type):
        super().__init__()
        self._critic_1 = network_type(state_dim, action_dim, hidden_dims)
        self._critic_2 = network_type(state_dim, action_dim, hidden_dims)

    def get_q_values(self, state_batch, action_batch):
        return (self._critic_1.get_q_values(state_batch, action_batch),
                self._critic_2.get_q_values(state_batch, action_batch))


def make_critic(state_dim, action_dim, hidden_dims, use_twin_critic, network_type):
    if use_twin_critic:
        return TwinCritic(state_dim, action_dim, hidden_dims, network_type)
    return network_type(state_dim, action_dim, hidden_dims)


def update_target_network(target_network, source_network, tau):
    for target_param, source_param in zip(target_network.parameters(), source_network.parameters()):
        target_param.data.copy_(tau * source_param.data + (1.0 - tau) * target_param.data)


def twin_critic_action_value_loss(state_batch, action_batch, expected_target_batch, critic):
    q_1, q_2 = critic.get_q_values(state_batch, action_batch)
    return F.mse_loss(q_1, expected_target_batch) + F.mse_loss(q_2, expected_target_batch)


class PolicyLearner:
    def __init__(self, training_rounds, batch_size):
        self._training_rounds = training_rounds
        self._batch_size = batch_size

    def learn(self, replay_buffer):
        report = {}
        for _ in range(self._training_rounds):
            batch = replay_buffer.sample(self._batch_size)
            report = self.learn_batch(batch)
        return report


class ActorCriticBase(PolicyLearner):
    def __init__(self, state_dim, action_dim, actor_hidden_dims, critic_hidden_dims, actor_learning_rate,
                 critic_learning_rate, actor_soft_update_tau, critic_soft_update_tau, discount_factor,
                 training_rounds, batch_size):
        super().__init__(training_rounds, batch_size)
        self._actor = VanillaContinuousActorNetwork(state_dim, actor_hidden_dims, action_dim)
        self._actor_optimizer = optim.AdamW([{"params": self._actor.parameters(), "lr": actor_learning_rate, "amsgrad": True}])
        self._actor_target = VanillaContinuousActorNetwork(state_dim, actor_hidden_dims, action_dim)
        update_target_network(self._actor_target, self._actor, tau=1)
        self._critic = make_critic(state_dim, action_dim, critic_hidden_dims, True, VanillaQValueNetwork)
        self._critic_optimizer = optim.AdamW([{"params": self._critic.parameters(), "lr": critic_learning_rate, "amsgrad": True}])
        self._critic_target = make_critic(state_dim, action_dim, critic_hidden_dims, True, VanillaQValueNetwork)
        update_target_network(self._critic_target, self._critic, tau=1)
        self._actor_soft_update_tau = actor_soft_update_tau
        self._critic_soft_update_tau = critic_soft_update_tau
        self._discount_factor = discount_factor


class DeepDeterministicPolicyGradient(ActorCriticBase):
    def __init__(self, state_dim, action_dim, actor_hidden_dims, critic_hidden_dims, actor_learning_rate=1e-3,
                 critic_learning_rate=1e-3, actor_soft_update_tau=0.005, critic_soft_update_tau=0.005,
                 discount_factor=0.99, training_rounds=1, batch_size=8):
        super().__init__(state_dim, action_dim, actor_hidden_dims, critic_hidden_dims, actor_learning_rate,
                         critic_learning_rate, actor_soft_update_tau, critic_soft_update_tau, discount_factor,
                         training_rounds, batch_size)

    def _actor_loss(self, batch):
        action_batch = self._actor.sample_action(batch.state)
        q1, q2 = self._critic.get_q_values(state_batch=batch.state, action_batch=action_batch)
        q = torch.minimum(q1, q2)
        loss = -q.mean()
        return loss


class TD3(DeepDeterministicPolicyGradient):
    def __init__(self, state_dim, action_dim, actor_hidden_dims, critic_hidden_dims, training_rounds=3,
                 batch_size=4, actor_update_freq=2, actor_update_noise=0.2, actor_update_noise_clip=0.5):
        super().__init__(state_dim, action_dim, actor_hidden_dims, critic_hidden_dims,
                         training_rounds=training_rounds, batch_size=batch_size)
        self._actor_update_freq = actor_update_freq
        self._actor_update_noise = actor_update_noise
        self._actor_update_noise_clip = actor_update_noise_clip
        self._critic_update_count = 0

    def learn_batch(self, batch):
        # The actor and the critic updates are arranged so that the actor loss's
        # gradient is cleared from the critic before the critic's own backward.
        self._critic_update_count += 1
        report = {}
        # delayed actor update
        self._actor_optimizer.zero_grad()
        if self._critic_update_count % self._actor_update_freq == 0:
            actor_loss = self._actor_loss(batch)
            actor_loss.backward(retain_graph=True)
            report["actor_loss"] = actor_loss.item()

        self._critic_optimizer.zero_grad()
        critic_loss = self._critic_loss(batch)  # critic update
        critic_loss.backward()
        self._actor_optimizer.step()
        self._critic_optimizer.step()
        report["critic_loss"] = critic_loss.item()

        if self._critic_update_count % self._actor_update_freq == 0:
            update_target_network(self._critic_target, self._critic, self._critic_soft_update_tau)
            update_target_network(self._actor_target, self._actor, self._actor_soft_update_tau)
        return report

    def _critic_loss(self, batch):
        with torch.no_grad():
            next_action = self._actor_target.sample_action(batch.next_state)
            noise = torch.normal(mean=0.0, std=self._actor_update_noise, size=next_action.size())
            noise = torch.clamp(noise, -self._actor_update_noise_clip, self._actor_update_noise_clip)
            next_action = torch.clamp(next_action + noise, -1.0, 1.0)
            next_q1, next_q2 = self._critic_target.get_q_values(state_batch=batch.next_state, action_batch=next_action)
            next_q = torch.minimum(next_q1, next_q2)
            expected_state_action_values = next_q * self._discount_factor * (1 - batch.done.float()) + batch.reward
        loss = twin_critic_action_value_loss(
            state_batch=batch.state,
            action_batch=batch.action,
            expected_target_batch=expected_state_action_values,
            critic=self._critic,
        )
        return loss


def online_learning(state_dim=3, action_dim=2, episodes=4, steps_per_episode=6, seed=0):
    random.seed(seed)
    torch.manual_seed(seed)
    agent = TD3(state_dim, action_dim, actor_hidden_dims=[8], critic_hidden_dims=[8])
    replay_buffer = BasicReplayBuffer(capacity=64)
    for _ in range(episodes):
        state = torch.randn(state_dim)
        for _ in range(steps_per_episode):
            action = torch.rand(action_dim) * 2 - 1
            next_state = torch.randn(state_dim)
            replay_buffer.push(state, action, float(torch.randn(())), next_state, False)
            state = next_state
        agent.learn(replay_buffer)


if __name__ == "__main__":
    online_learning()
