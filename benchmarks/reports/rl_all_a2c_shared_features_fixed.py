# source: https://github.com/cpnota/autonomous-learning-library/issues/61
# pattern: the fix (PR #63) for backpropagating twice through shared features: FeatureNetwork hands the heads a detached leaf copy of its output, the value and policy heads each backprop, step and clear their own optimizer in reinforce(), and FeatureNetwork.reinforce() backprops its cached graphs with the leaf's summed .grad and steps its own optimizer; every optimizer is built by the a2c() preset builder and steps once per batch on its own loss
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: feature optimizer applies only backward@L74, value optimizer only backward@L118, policy optimizer only backward@L158
import torch
from torch import nn
from torch.nn import functional, utils
from torch.nn.functional import mse_loss
from torch.optim import Adam


class DummyWriter:
    def add_loss(self, name, value):
        pass


class NStepBatchBuffer:
    def __init__(self, n_steps, n_envs, discount_factor=1):
        self.n_steps = n_steps
        self.n_envs = n_envs
        self.gamma = discount_factor
        self._states = []
        self._rewards = []

    def __len__(self):
        return max(len(self._states) - 1, 0) * self.n_envs

    def store(self, states, actions, rewards):
        if self._states:
            self._rewards.append(rewards)
        self._states.append(states)

    def sample(self, batch_size):
        n = self.n_steps
        returns, lengths = [], []
        for i in range(n):
            ret = torch.zeros(self.n_envs)
            for k, r in enumerate(self._rewards[i:n]):
                ret = ret + (self.gamma ** k) * r
            returns.append(ret)
            lengths.append(torch.full((self.n_envs,), float(n - i)))
        next_states = torch.cat([self._states[n]] * n)
        self._states, self._rewards = self._states[n:], []
        return None, None, torch.cat(returns), next_states, torch.cat(lengths)


class FeatureNetwork:
    def __init__(self, model, optimizer, clip_grad=0):
        self.model = model
        self.optimizer = optimizer
        self.clip_grad = clip_grad
        self._cache = []
        self._out = []

    def __call__(self, states):
        features = self.model(states.float())
        out = features.detach()
        out.requires_grad = True
        self._cache.append(features)
        self._out.append(out)
        return out

    def eval(self, states):
        with torch.no_grad():
            training = self.model.training
            result = self.model(states.float())
            self.model.train(training)
            return result

    def reinforce(self):
        graphs, grads = self._decache()
        graphs.backward(grads)
        if self.clip_grad != 0:
            utils.clip_grad_norm_(self.model.parameters(), self.clip_grad)
        self.optimizer.step()
        self.optimizer.zero_grad()

    def _decache(self):
        graphs = []
        grads = []
        for graph, out in zip(self._cache, self._out):
            if out.grad is not None:
                graphs.append(graph)
                grads.append(out.grad)
        self._cache = []
        self._out = []
        return torch.cat(graphs), torch.cat(grads)


class ValueNetwork:
    def __init__(self, model, optimizer=None, loss=mse_loss, loss_scaling=1, clip_grad=0, writer=DummyWriter()):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else Adam(model.parameters())
        self.loss = loss
        self.loss_scaling = loss_scaling
        self._cache = []
        self.clip_grad = clip_grad
        self._writer = writer

    def __call__(self, states):
        result = self.model(states).squeeze(1)
        self._cache.append(result)
        return result.detach()

    def eval(self, states):
        with torch.no_grad():
            return self.model(states).squeeze(1)

    def reinforce(self, td_errors, retain_graph=False):
        td_errors = td_errors.view(-1)
        cache = self.decache(len(td_errors))
        if cache.requires_grad:
            targets = td_errors + cache.detach()
            loss = self.loss(cache, targets) * self.loss_scaling
            self._writer.add_loss('value', loss)
            loss.backward(retain_graph=retain_graph)
            if self.clip_grad != 0:
                utils.clip_grad_norm_(self.model.parameters(), self.clip_grad)
            self.optimizer.step()
            self.optimizer.zero_grad()

    def decache(self, batch_size):
        cache = torch.cat(self._cache)
        self._cache = []
        return cache


class SoftmaxPolicy:
    def __init__(self, model, optimizer, actions, entropy_loss_scaling=0, clip_grad=0, writer=DummyWriter()):
        self.model = model
        self.optimizer = optimizer
        self.entropy_loss_scaling = entropy_loss_scaling
        self.clip_grad = clip_grad
        self._log_probs = []
        self._entropy = []
        self._writer = writer

    def __call__(self, state, action=None, prob=None):
        scores = self.model(state)
        probs = functional.softmax(scores, dim=-1)
        distribution = torch.distributions.Categorical(probs)
        action = distribution.sample()
        self.cache(distribution, action)
        return action

    def reinforce(self, errors, retain_graph=False):
        errors = errors.view(-1)
        batch_size = len(errors)
        log_probs, entropy = self.decache(batch_size)
        if log_probs.requires_grad:
            policy_loss = -torch.dot(log_probs, errors) / batch_size
            entropy_loss = -entropy.mean()
            self._writer.add_loss('policy', policy_loss)
            self._writer.add_loss('entropy', entropy_loss)
            loss = policy_loss + self.entropy_loss_scaling * entropy_loss
            loss.backward(retain_graph=retain_graph)

            if self.clip_grad != 0:
                utils.clip_grad_norm_(self.model.parameters(), self.clip_grad)
            self.optimizer.step()
            self.optimizer.zero_grad()

    def cache(self, distribution, action):
        self._log_probs.append(distribution.log_prob(action))
        self._entropy.append(distribution.entropy())

    def decache(self, batch_size):
        log_probs, entropy = torch.cat(self._log_probs), torch.cat(self._entropy)
        self._log_probs, self._entropy = [], []
        return log_probs, entropy


class A2C:
    def __init__(self, features, v, policy, n_envs=None, n_steps=4, discount_factor=0.99):
        if n_envs is None:
            raise RuntimeError("Must specify n_envs.")
        self.features = features
        self.v = v
        self.policy = policy
        self.n_envs = n_envs
        self.n_steps = n_steps
        self.discount_factor = discount_factor
        self._batch_size = n_envs * n_steps
        self._buffer = self._make_buffer()
        self._features = []

    def act(self, states, rewards):
        self._buffer.store(states, torch.zeros(self.n_envs), rewards)
        self._train()
        features = self.features(states)
        self._features.append(features)
        return self.policy(features)

    def _train(self):
        if len(self._buffer) >= self._batch_size:
            states = torch.cat(self._features)
            _, _, returns, next_states, rollout_lengths = self._buffer.sample(self._batch_size)
            td_errors = (
                returns
                + (self.discount_factor ** rollout_lengths)
                * self.v.eval(self.features.eval(next_states))
                - self.v(states)
            )
            self.v.reinforce(td_errors)
            self.policy.reinforce(td_errors)
            self.features.reinforce()
            self._features = []

    def _make_buffer(self):
        return NStepBatchBuffer(self.n_steps, self.n_envs, discount_factor=self.discount_factor)


def fc_features(env):
    return nn.Sequential(nn.Linear(env.state_dim, 16), nn.ReLU())


def fc_value(_):
    return nn.Linear(16, 1)


def fc_policy(env):
    return nn.Linear(16, env.n_actions)


def a2c(clip_grad=0.1, discount_factor=0.99, entropy_loss_scaling=0.001, lr=1e-3, n_envs=3, n_steps=4):
    def _a2c(envs, writer=DummyWriter()):
        env = envs[0]
        feature_model = fc_features(env)
        value_model = fc_value(env)
        policy_model = fc_policy(env)

        feature_optimizer = Adam(feature_model.parameters(), lr=lr)
        value_optimizer = Adam(value_model.parameters(), lr=lr)
        policy_optimizer = Adam(policy_model.parameters(), lr=lr)

        features = FeatureNetwork(feature_model, feature_optimizer, clip_grad=clip_grad)
        v = ValueNetwork(value_model, value_optimizer, clip_grad=clip_grad, writer=writer)
        policy = SoftmaxPolicy(policy_model, policy_optimizer, env.n_actions,
                               entropy_loss_scaling=entropy_loss_scaling, clip_grad=clip_grad, writer=writer)
        return A2C(features, v, policy, n_envs=n_envs, n_steps=n_steps, discount_factor=discount_factor)
    return _a2c, n_envs


class ToyEnv:  # stands in for a gym classic-control env
    state_dim = 4
    n_actions = 2


def run_experiment(frames=14):
    torch.manual_seed(0)
    make_agent, n_envs = a2c()
    envs = [ToyEnv() for _ in range(n_envs)]
    agent = make_agent(envs)
    states, rewards = torch.randn(n_envs, ToyEnv.state_dim), torch.zeros(n_envs)
    for _ in range(frames):
        actions = agent.act(states, rewards)
        states = torch.randn(n_envs, ToyEnv.state_dim)
        rewards = actions.float()


if __name__ == "__main__":
    run_experiment()
