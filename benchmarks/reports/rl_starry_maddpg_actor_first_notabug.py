# source: https://github.com/starry-sky6688/MADDPG/issues/27
# pattern: MADDPG.train updates the actor first (-critic_network(o, u) with its own action, which leaves dQ/dcritic in the critic), then critic_optim.zero_grad() wipes that before critic_loss's backward; the issue asked about updating the critic first (the paper's order, which raised an in-place error), and this repository order, which the maintainer kept, lets no optimizer apply the other's loss
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: every actor optimizer applies only backward@L102 (actor loss), every critic optimizer only backward@L105 (critic loss)
import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


class Actor(nn.Module):
    def __init__(self, args, agent_id):
        super(Actor, self).__init__()
        self.max_action = args.high_action
        self.fc1 = nn.Linear(args.obs_shape[agent_id], 16)
        self.fc2 = nn.Linear(16, 16)
        self.action_out = nn.Linear(16, args.action_shape[agent_id])

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        actions = self.max_action * torch.tanh(self.action_out(x))
        return actions


class Critic(nn.Module):
    def __init__(self, args):
        super(Critic, self).__init__()
        self.max_action = args.high_action
        self.fc1 = nn.Linear(sum(args.obs_shape) + sum(args.action_shape), 16)
        self.fc2 = nn.Linear(16, 16)
        self.q_out = nn.Linear(16, 1)

    def forward(self, state, action):
        state = torch.cat(state, dim=1)
        action = [a / self.max_action for a in action]
        action = torch.cat(action, dim=1)
        x = torch.cat([state, action], dim=1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        q_value = self.q_out(x)
        return q_value


class MADDPG:
    def __init__(self, args, agent_id):
        self.args = args
        self.agent_id = agent_id
        self.train_step = 0

        self.actor_network = Actor(args, agent_id)
        self.critic_network = Critic(args)
        self.actor_target_network = Actor(args, agent_id)
        self.critic_target_network = Critic(args)
        self.actor_target_network.load_state_dict(self.actor_network.state_dict())
        self.critic_target_network.load_state_dict(self.critic_network.state_dict())

        self.actor_optim = torch.optim.Adam(self.actor_network.parameters(), lr=self.args.lr_actor)
        self.critic_optim = torch.optim.Adam(self.critic_network.parameters(), lr=self.args.lr_critic)

    def _soft_update_target_network(self):
        for target_param, param in zip(self.actor_target_network.parameters(), self.actor_network.parameters()):
            target_param.data.copy_((1 - self.args.tau) * target_param.data + self.args.tau * param.data)
        for target_param, param in zip(self.critic_target_network.parameters(), self.critic_network.parameters()):
            target_param.data.copy_((1 - self.args.tau) * target_param.data + self.args.tau * param.data)

    def train(self, transitions, other_agents):
        transitions = {key: torch.as_tensor(value, dtype=torch.float32) for key, value in transitions.items()}
        r = transitions['r_%d' % self.agent_id]
        o, u, o_next = [], [], []
        for agent_id in range(self.args.n_agents):
            o.append(transitions['o_%d' % agent_id])
            u.append(transitions['u_%d' % agent_id])
            o_next.append(transitions['o_next_%d' % agent_id])

        # calculate the target Q value function
        u_next = []
        with torch.no_grad():
            index = 0
            for agent_id in range(self.args.n_agents):
                if agent_id == self.agent_id:
                    u_next.append(self.actor_target_network(o_next[agent_id]))
                else:
                    u_next.append(other_agents[index].policy.actor_target_network(o_next[agent_id]))
                    index += 1
            q_next = self.critic_target_network(o_next, u_next).detach()
            target_q = (r.unsqueeze(1) + self.args.gamma * q_next).detach()

        # the q loss
        q_value = self.critic_network(o, u)
        critic_loss = (target_q - q_value).pow(2).mean()

        # the actor loss: this agent's action is re-chosen, the others' stay as stored
        u[self.agent_id] = self.actor_network(o[self.agent_id])
        actor_loss = - self.critic_network(o, u).mean()
        # update the network
        self.actor_optim.zero_grad()
        actor_loss.backward()
        self.actor_optim.step()
        self.critic_optim.zero_grad()
        critic_loss.backward()
        self.critic_optim.step()

        self._soft_update_target_network()
        self.train_step += 1


class Agent:
    def __init__(self, agent_id, args):
        self.args = args
        self.agent_id = agent_id
        self.policy = MADDPG(args, agent_id)

    def select_action(self, o, noise_rate, epsilon):
        if random.random() < epsilon:
            u = (torch.rand(self.args.action_shape[self.agent_id]) * 2 - 1) * self.args.high_action
        else:
            inputs = torch.as_tensor(o, dtype=torch.float32).unsqueeze(0)
            u = self.policy.actor_network(inputs).squeeze(0)
            u = u + noise_rate * self.args.high_action * torch.randn_like(u)
            u = u.clamp(-self.args.high_action, self.args.high_action)
        return u.clone()

    def learn(self, transitions, other_agents):
        self.policy.train(transitions, other_agents)


class Buffer:
    def __init__(self, args):
        self.args = args
        self.storage = []
        self.current_size = 0

    def store_episode(self, o, u, r, o_next):
        self.storage.append((o, u, r, o_next))
        self.storage = self.storage[-self.args.buffer_size:]
        self.current_size = len(self.storage)

    def sample(self, batch_size):
        rows = random.sample(self.storage, batch_size)
        temp_buffer = {}
        for i in range(self.args.n_agents):
            temp_buffer['o_%d' % i] = torch.stack([row[0][i] for row in rows])
            temp_buffer['u_%d' % i] = torch.stack([row[1][i] for row in rows])
            temp_buffer['r_%d' % i] = torch.tensor([row[2][i] for row in rows])
            temp_buffer['o_next_%d' % i] = torch.stack([row[3][i] for row in rows])
        return temp_buffer


class ToyMultiAgentEnv:  # stands in for the multi-agent particle env
    def __init__(self, args):
        self.args = args

    def reset(self):
        return [torch.randn(n) for n in self.args.obs_shape]

    def step(self, actions):
        s_next = [torch.randn(n) for n in self.args.obs_shape]
        r = [float(-a.pow(2).sum()) for a in actions]
        return s_next, r, [False] * self.args.n_agents, {}


class Runner:
    def __init__(self, args, env):
        self.args = args
        self.noise = args.noise_rate
        self.epsilon = args.epsilon
        self.episode_limit = args.max_episode_len
        self.env = env
        self.agents = self._init_agents()
        self.buffer = Buffer(args)

    def _init_agents(self):
        agents = []
        for i in range(self.args.n_agents):
            agents.append(Agent(i, self.args))
        return agents

    def run(self):
        for time_step in range(self.args.time_steps):
            if time_step % self.episode_limit == 0:
                s = self.env.reset()
            u = []
            with torch.no_grad():
                for agent_id, agent in enumerate(self.agents):
                    u.append(agent.select_action(s[agent_id], self.noise, self.epsilon))
            s_next, r, done, info = self.env.step(u)
            self.buffer.store_episode(s, u, r, s_next)
            s = s_next
            if self.buffer.current_size >= self.args.batch_size:
                transitions = self.buffer.sample(self.args.batch_size)
                for agent in self.agents:
                    other_agents = self.agents.copy()
                    other_agents.remove(agent)
                    agent.learn(transitions, other_agents)


def get_args():
    args = argparse.Namespace(n_agents=2, obs_shape=[3, 4], action_shape=[2, 2], high_action=1.0,
                              lr_actor=1e-4, lr_critic=1e-3, gamma=0.95, tau=0.01, noise_rate=0.1,
                              epsilon=0.1, max_episode_len=5, time_steps=10, batch_size=4, buffer_size=32)
    return args


if __name__ == '__main__':
    random.seed(0)
    torch.manual_seed(0)
    args = get_args()
    runner = Runner(args, ToyMultiAgentEnv(args))
    runner.run()
