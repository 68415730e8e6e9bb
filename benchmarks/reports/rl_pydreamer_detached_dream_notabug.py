# source: https://github.com/jurgisp/pydreamer/pull/14
# pattern: Dreamer-like training: the world model, actor and critic optimizers (built by Dreamer.init_optimizers) are all cleared, the three losses from Dreamer.training_step all backprop, then all step; the imagined trajectory is rolled out with the world model frozen (wm.requires_grad_(False)) and handed to ActorCritic.training_step detached, so loss_actor/loss_critic never reach the world model; the PR proposed not detaching the reward predictions and the maintainer answered that they must stay detached (GradScaler disabled, CPU)
# case: trap
# expect: clean
# spread: multi
# label: contributions.py (per step, by backward ordinal, all from the loop at L225): optimizer #0 (world model) applies only ordinal 3k (loss_model), #1 (actor) only 3k+1 (loss_actor), #2 (critic) only 3k+2 (loss_critic)
import argparse

import torch
import torch.distributions as D
import torch.nn as nn
import torch.nn.functional as F
from torch.amp import GradScaler


class MLP(nn.Module):
    def __init__(self, in_dim, out_dim, hidden_dim, hidden_layers):
        super().__init__()
        layers, dim = [], in_dim
        for _ in range(hidden_layers):
            layers += [nn.Linear(dim, hidden_dim), nn.ELU()]
            dim = hidden_dim
        layers.append(nn.Linear(dim, out_dim))
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class RSSMCell(nn.Module):
    def __init__(self, embed_dim, action_dim, deter_dim, stoch_dim):
        super().__init__()
        self.gru = nn.GRUCell(stoch_dim + action_dim, deter_dim)
        self.prior_mlp = nn.Linear(deter_dim, stoch_dim)
        self.post_mlp = nn.Linear(deter_dim + embed_dim, stoch_dim)

    def forward(self, embed, action, state):
        deter, stoch = state
        deter = self.gru(torch.cat([stoch, action], -1), deter)
        prior = self.prior_mlp(deter)
        post = self.post_mlp(torch.cat([deter, embed], -1))
        return prior, post, (deter, torch.tanh(post))

    def forward_prior(self, action, _, state):
        deter, stoch = state
        deter = self.gru(torch.cat([stoch, action], -1), deter)
        prior = self.prior_mlp(deter)
        return prior, (deter, torch.tanh(prior))


class RSSMCore(nn.Module):
    def __init__(self, embed_dim, action_dim, deter_dim, stoch_dim):
        super().__init__()
        self.cell = RSSMCell(embed_dim, action_dim, deter_dim, stoch_dim)

    def to_feature(self, deter, stoch):
        return torch.cat([deter, stoch], -1)


class MultiDecoder(nn.Module):
    def __init__(self, features_dim, obs_dim):
        super().__init__()
        self.image = nn.Linear(features_dim, obs_dim)
        self.reward = nn.Linear(features_dim, 1)
        self.terminal = nn.Linear(features_dim, 1)


class WorldModel(nn.Module):
    def __init__(self, conf):
        super().__init__()
        self.deter_dim, self.stoch_dim = conf.deter_dim, conf.stoch_dim
        self.kl_weight = conf.kl_weight
        self.encoder = nn.Linear(conf.obs_dim, conf.embed_dim)
        self.core = RSSMCore(conf.embed_dim, conf.action_dim, conf.deter_dim, conf.stoch_dim)
        self.decoder = MultiDecoder(conf.deter_dim + conf.stoch_dim, conf.obs_dim)

    def init_state(self, batch_size):
        return (torch.zeros(batch_size, self.deter_dim), torch.zeros(batch_size, self.stoch_dim))

    def training_step(self, obs, in_state):
        embed = self.encoder(obs['image'])
        state, features, states, loss_kl = in_state, [], [], 0.0
        for t in range(embed.shape[0]):
            prior, post, state = self.core.cell(embed[t], obs['action'][t], state)
            loss_kl = loss_kl + F.mse_loss(prior, post.detach()) + 0.1 * F.mse_loss(post, prior.detach())
            features.append(self.core.to_feature(*state))
            states.append(state)
        features = torch.stack(features)
        loss_image = F.mse_loss(self.decoder.image(features), obs['image'])
        loss_reward = F.mse_loss(self.decoder.reward(features).squeeze(-1), obs['reward'])
        loss_terminal = F.binary_cross_entropy_with_logits(self.decoder.terminal(features).squeeze(-1), obs['terminal'])
        loss_model = loss_image + loss_reward + loss_terminal + self.kl_weight * loss_kl / embed.shape[0]
        deter = torch.stack([s[0] for s in states])
        stoch = torch.stack([s[1] for s in states])
        metrics = dict(loss_wm=loss_model.detach())
        return loss_model, features, (deter, stoch), (state[0].detach(), state[1].detach()), metrics


class ActorCritic(nn.Module):
    def __init__(self, in_dim, out_actions, hidden_dim=16, hidden_layers=2, gamma=0.99, lambda_gae=0.95,
                 entropy_weight=1e-3, target_interval=2):
        super().__init__()
        self.gamma, self.lambda_ = gamma, lambda_gae
        self.entropy_weight, self.target_interval = entropy_weight, target_interval
        self.actor = MLP(in_dim, out_actions, hidden_dim, hidden_layers)
        self.critic = MLP(in_dim, 1, hidden_dim, hidden_layers)
        self.critic_target = MLP(in_dim, 1, hidden_dim, hidden_layers)
        self.critic_target.requires_grad_(False)
        self.train_steps = 0

    def forward_actor(self, features):
        return D.OneHotCategorical(logits=self.actor(features).float())

    def training_step(self, features, actions, rewards, terminals):
        if self.train_steps % self.target_interval == 0:
            self.update_critic_target()
        self.train_steps += 1

        reward1, terminal0, terminal1 = rewards[1:], terminals[:-1], terminals[1:]
        value_t = self.critic_target(features).squeeze(-1)
        value0t, value1t = value_t[:-1], value_t[1:]
        advantage = - value0t + reward1 + self.gamma * (1.0 - terminal1) * value1t
        advantage_gae, agae = [], None
        for adv, term in zip(reversed(advantage.unbind()), reversed(terminal1.unbind())):
            agae = adv if agae is None else adv + self.lambda_ * self.gamma * (1.0 - term) * agae
            advantage_gae.append(agae)
        advantage_gae.reverse()
        advantage_gae = torch.stack(advantage_gae)
        value_target = advantage_gae + value0t
        reality_weight = (1 - terminal0).log().cumsum(dim=0).exp()

        value0 = self.critic(features).squeeze(-1)[:-1]
        loss_critic = 0.5 * torch.square(value_target.detach() - value0)
        loss_critic = (loss_critic * reality_weight).mean()

        policy_distr = self.forward_actor(features[:-1])
        action_logprob = policy_distr.log_prob(actions)
        loss_policy = - action_logprob * advantage_gae.detach()
        policy_entropy = policy_distr.entropy()
        loss_actor = loss_policy - self.entropy_weight * policy_entropy
        loss_actor = (loss_actor * reality_weight).mean()
        return (loss_actor, loss_critic), dict(loss_critic=loss_critic.detach(), loss_actor=loss_actor.detach())

    def update_critic_target(self):
        self.critic_target.load_state_dict(self.critic.state_dict())


class Dreamer(nn.Module):
    def __init__(self, conf):
        super().__init__()
        features_dim = conf.deter_dim + conf.stoch_dim
        self.imag_horizon = conf.imag_horizon
        self.wm = WorldModel(conf)
        self.ac = ActorCritic(in_dim=features_dim, out_actions=conf.action_dim, gamma=conf.gamma,
                              lambda_gae=conf.lambda_gae, entropy_weight=conf.entropy,
                              target_interval=conf.target_interval)

    def init_optimizers(self, lr, lr_actor=None, lr_critic=None, eps=1e-5):
        optimizer_wm = torch.optim.AdamW(self.wm.parameters(), lr=lr, eps=eps)
        optimizer_actor = torch.optim.AdamW(self.ac.actor.parameters(), lr=lr_actor or lr, eps=eps)
        optimizer_critic = torch.optim.AdamW(self.ac.critic.parameters(), lr=lr_critic or lr, eps=eps)
        return optimizer_wm, optimizer_actor, optimizer_critic

    def grad_clip(self, grad_clip, grad_clip_ac=None):
        return {
            'grad_norm': nn.utils.clip_grad_norm_(self.wm.parameters(), grad_clip),
            'grad_norm_actor': nn.utils.clip_grad_norm_(self.ac.actor.parameters(), grad_clip_ac or grad_clip),
            'grad_norm_critic': nn.utils.clip_grad_norm_(self.ac.critic.parameters(), grad_clip_ac or grad_clip),
        }

    def training_step(self, obs, in_state):
        loss_model, features, states, out_state, metrics = self.wm.training_step(obs, in_state)

        # Dream from every posterior state of the batch, with the world model frozen
        in_state_dream = tuple(x.detach().flatten(0, 1) for x in states)
        features_dream, actions_dream, rewards_dream, terminals_dream = self.dream(in_state_dream, self.imag_horizon)
        (loss_actor, loss_critic), metrics_ac = self.ac.training_step(features_dream.detach(),
                                                                      actions_dream.detach(),
                                                                      rewards_dream.detach(),
                                                                      terminals_dream.detach())
        metrics.update(metrics_ac)
        losses = (loss_model, loss_actor, loss_critic)
        return losses, out_state, metrics

    def dream(self, in_state, imag_horizon):
        features, actions = [], []
        state = in_state
        self.wm.requires_grad_(False)  # Prevent dynamics gradients from affecting world model
        for i in range(imag_horizon):
            feature = self.wm.core.to_feature(*state)
            action = self.ac.forward_actor(feature).sample()
            features.append(feature)
            actions.append(action)
            _, state = self.wm.core.cell.forward_prior(action, None, state)
        features.append(self.wm.core.to_feature(*state))
        features = torch.stack(features)
        actions = torch.stack(actions)
        rewards = self.wm.decoder.reward(features).squeeze(-1)
        terminals = torch.sigmoid(self.wm.decoder.terminal(features)).squeeze(-1)
        self.wm.requires_grad_(True)
        return features, actions, rewards, terminals


def random_batch(conf):
    T, B = conf.batch_length, conf.batch_size
    return dict(image=torch.randn(T, B, conf.obs_dim),
                action=F.one_hot(torch.randint(0, conf.action_dim, (T, B)), conf.action_dim).float(),
                reward=torch.randn(T, B),
                terminal=(torch.rand(T, B) < 0.05).float())


def run(conf):
    torch.manual_seed(0)
    model = Dreamer(conf)
    optimizers = model.init_optimizers(conf.adam_lr, conf.adam_lr_actor, conf.adam_lr_critic, conf.adam_eps)
    scaler = GradScaler("cpu", enabled=conf.amp)
    state = model.wm.init_state(conf.batch_size)
    for steps in range(conf.n_steps):
        obs = random_batch(conf)
        losses, state, metrics = model.training_step(obs, state)

        for opt in optimizers:
            opt.zero_grad()
        for loss in losses:
            scaler.scale(loss).backward()

        for opt in optimizers:
            scaler.unscale_(opt)
        grad_metrics = model.grad_clip(conf.grad_clip, conf.grad_clip_ac)
        for opt in optimizers:
            scaler.step(opt)
        scaler.update()


if __name__ == '__main__':
    conf = argparse.Namespace(obs_dim=6, embed_dim=8, action_dim=3, deter_dim=8, stoch_dim=4, kl_weight=1.0,
                              imag_horizon=4, gamma=0.99, lambda_gae=0.95, entropy=1e-3, target_interval=2,
                              adam_lr=3e-4, adam_lr_actor=1e-4, adam_lr_critic=1e-4, adam_eps=1e-5,
                              grad_clip=200, grad_clip_ac=200, amp=False, batch_length=5, batch_size=3, n_steps=4)
    run(conf)
