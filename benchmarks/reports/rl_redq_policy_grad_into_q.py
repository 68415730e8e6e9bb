# source: https://github.com/watchernyu/REDQ/pull/3
# pattern: REDQ agent's train(): every Q optimizer clears and q_loss backprops first, then the policy loss (through self.q_net_list on a_tilda) backprops into the Q nets, and the Q optimizers step after it, applying -Q from the policy loss
# case: bug
# expect: ZG006@184-185
# spread: multi
# label: contributions.py: the Q optimizers (#1-#3) apply backward@L172 (the policy loss) besides their own q_loss backward@L159
import math

import torch
import torch.nn as nn
import torch.optim as optim
from torch import Tensor
from torch.nn import functional as F

LOG_SIG_MAX = 2
LOG_SIG_MIN = -20


def weights_init_(m):
    if isinstance(m, nn.Linear):
        torch.nn.init.xavier_uniform_(m.weight, gain=1)
        torch.nn.init.constant_(m.bias, 0)


def soft_update_model1_with_model2(model1, model2, rou):
    for model1_param, model2_param in zip(model1.parameters(), model2.parameters()):
        model1_param.data.copy_(rou * model1_param.data + (1 - rou) * model2_param.data)


class ReplayBuffer:
    def __init__(self, obs_dim, act_dim, size):
        self.obs1_buf = torch.zeros(size, obs_dim)
        self.obs2_buf = torch.zeros(size, obs_dim)
        self.acts_buf = torch.zeros(size, act_dim)
        self.rews_buf = torch.zeros(size)
        self.done_buf = torch.zeros(size)
        self.ptr, self.size, self.max_size = 0, 0, size

    def store(self, obs, act, rew, next_obs, done):
        self.obs1_buf[self.ptr] = obs
        self.obs2_buf[self.ptr] = next_obs
        self.acts_buf[self.ptr] = act
        self.rews_buf[self.ptr] = rew
        self.done_buf[self.ptr] = done
        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

    def sample_batch(self, batch_size=32):
        idxs = torch.randint(0, self.size, (batch_size,))
        return dict(obs1=self.obs1_buf[idxs], obs2=self.obs2_buf[idxs], acts=self.acts_buf[idxs],
                    rews=self.rews_buf[idxs], done=self.done_buf[idxs])


class Mlp(nn.Module):
    def __init__(self, input_size, output_size, hidden_sizes, hidden_activation=F.relu):
        super().__init__()
        self.hidden_activation = hidden_activation
        self.hidden_layers = nn.ModuleList()
        in_size = input_size
        for next_size in hidden_sizes:
            self.hidden_layers.append(nn.Linear(in_size, next_size))
            in_size = next_size
        self.last_fc_layer = nn.Linear(in_size, output_size)
        self.apply(weights_init_)

    def forward(self, input):
        h = input
        for fc_layer in self.hidden_layers:
            h = self.hidden_activation(fc_layer(h))
        return self.last_fc_layer(h)


class TanhGaussianPolicy(Mlp):
    def __init__(self, obs_dim, action_dim, hidden_sizes, action_limit=1.0):
        super().__init__(obs_dim, action_dim, hidden_sizes)
        self.last_fc_log_std = nn.Linear(hidden_sizes[-1], action_dim)
        self.action_limit = action_limit
        self.apply(weights_init_)

    def forward(self, obs, deterministic=False, return_log_prob=True):
        h = obs
        for fc_layer in self.hidden_layers:
            h = self.hidden_activation(fc_layer(h))
        mean = self.last_fc_layer(h)
        log_std = torch.clamp(self.last_fc_log_std(h), LOG_SIG_MIN, LOG_SIG_MAX)
        std = torch.exp(log_std)
        pre_tanh_value = mean if deterministic else mean + std * torch.randn_like(mean)
        action = torch.tanh(pre_tanh_value)
        log_prob = None
        if return_log_prob:
            normal_log_prob = -((pre_tanh_value - mean) ** 2) / (2 * std ** 2) - log_std - 0.5 * math.log(2 * math.pi)
            log_prob = (normal_log_prob - torch.log(1 - action * action + 1e-6)).sum(1, keepdim=True)
        return action * self.action_limit, mean, log_std, log_prob, std, pre_tanh_value


class REDQSACAgent(object):
    def __init__(self, obs_dim, act_dim, act_limit, hidden_sizes=(8, 8), replay_size=64, batch_size=8,
                 lr=3e-4, gamma=0.99, polyak=0.995, alpha=0.2, auto_alpha=True, start_steps=4,
                 utd_ratio=4, num_Q=3, num_min=2, policy_update_delay=2):
        self.policy_net = TanhGaussianPolicy(obs_dim, act_dim, hidden_sizes, action_limit=act_limit)
        self.q_net_list, self.q_target_net_list = [], []
        for q_i in range(num_Q):
            new_q_net = Mlp(obs_dim + act_dim, 1, hidden_sizes)
            self.q_net_list.append(new_q_net)
            new_q_target_net = Mlp(obs_dim + act_dim, 1, hidden_sizes)
            new_q_target_net.load_state_dict(new_q_net.state_dict())
            self.q_target_net_list.append(new_q_target_net)
        self.policy_optimizer = optim.Adam(self.policy_net.parameters(), lr=lr)
        self.q_optimizer_list = []
        for q_i in range(num_Q):
            self.q_optimizer_list.append(optim.Adam(self.q_net_list[q_i].parameters(), lr=lr))
        self.auto_alpha = auto_alpha
        self.target_entropy = -act_dim
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.alpha_optim = optim.Adam([self.log_alpha], lr=lr)
        self.alpha = self.log_alpha.exp().item() if auto_alpha else alpha
        self.replay_buffer = ReplayBuffer(obs_dim, act_dim, replay_size)
        self.mse_criterion = nn.MSELoss()
        self.gamma, self.polyak, self.batch_size = gamma, polyak, batch_size
        self.num_min, self.num_Q, self.utd_ratio = num_min, num_Q, utd_ratio
        self.start_steps, self.policy_update_delay = start_steps, policy_update_delay

    def store_data(self, o, a, r, o2, d):
        self.replay_buffer.store(o, a, r, o2, d)

    def sample_data(self, batch_size):
        batch = self.replay_buffer.sample_batch(batch_size)
        return batch['obs1'], batch['obs2'], batch['acts'], batch['rews'].unsqueeze(1), batch['done'].unsqueeze(1)

    def get_redq_q_target_no_grad(self, obs_next_tensor, rews_tensor, done_tensor):
        sample_idxs = torch.randperm(self.num_Q)[:self.num_min].tolist()
        with torch.no_grad():
            a_tilda_next, _, _, log_prob_a_tilda_next, _, _ = self.policy_net.forward(obs_next_tensor)
            q_prediction_next_list = []
            for sample_idx in sample_idxs:
                q_prediction_next = self.q_target_net_list[sample_idx](torch.cat([obs_next_tensor, a_tilda_next], 1))
                q_prediction_next_list.append(q_prediction_next)
            min_q, _ = torch.min(torch.cat(q_prediction_next_list, 1), dim=1, keepdim=True)
            y_q = rews_tensor + self.gamma * (1 - done_tensor) * (min_q - self.alpha * log_prob_a_tilda_next)
        return y_q, sample_idxs

    def train(self, logger):
        num_update = 0 if self.replay_buffer.size <= self.start_steps else self.utd_ratio
        for i_update in range(num_update):
            obs_tensor, obs_next_tensor, acts_tensor, rews_tensor, done_tensor = self.sample_data(self.batch_size)

            """Q loss"""
            y_q, sample_idxs = self.get_redq_q_target_no_grad(obs_next_tensor, rews_tensor, done_tensor)
            q_prediction_list = []
            for q_i in range(self.num_Q):
                q_prediction = self.q_net_list[q_i](torch.cat([obs_tensor, acts_tensor], 1))
                q_prediction_list.append(q_prediction)
            q_prediction_cat = torch.cat(q_prediction_list, dim=1)
            y_q = y_q.expand((-1, self.num_Q)) if y_q.shape[1] == 1 else y_q
            q_loss_all = self.mse_criterion(q_prediction_cat, y_q) * self.num_Q

            for q_i in range(self.num_Q):
                self.q_optimizer_list[q_i].zero_grad()
            q_loss_all.backward()

            """policy and alpha loss"""
            if ((i_update + 1) % self.policy_update_delay == 0) or i_update == num_update - 1:
                a_tilda, mean_a_tilda, log_std_a_tilda, log_prob_a_tilda, _, pretanh = self.policy_net.forward(obs_tensor)
                q_a_tilda_list = []
                for sample_idx in range(self.num_Q):
                    q_a_tilda = self.q_net_list[sample_idx](torch.cat([obs_tensor, a_tilda], 1))
                    q_a_tilda_list.append(q_a_tilda)
                q_a_tilda_cat = torch.cat(q_a_tilda_list, 1)
                ave_q = torch.mean(q_a_tilda_cat, dim=1, keepdim=True)
                policy_loss = (self.alpha * log_prob_a_tilda - ave_q).mean()
                self.policy_optimizer.zero_grad()
                policy_loss.backward()

                if self.auto_alpha:
                    alpha_loss = -(self.log_alpha * (log_prob_a_tilda + self.target_entropy).detach()).mean()
                    self.alpha_optim.zero_grad()
                    alpha_loss.backward()
                    self.alpha_optim.step()
                    self.alpha = self.log_alpha.exp().item()
                else:
                    alpha_loss = Tensor([0])

            """update networks"""
            for q_i in range(self.num_Q):
                self.q_optimizer_list[q_i].step()

            if ((i_update + 1) % self.policy_update_delay == 0) or i_update == num_update - 1:
                self.policy_optimizer.step()

            for q_i in range(self.num_Q):
                soft_update_model1_with_model2(self.q_target_net_list[q_i], self.q_net_list[q_i], self.polyak)

            if i_update == num_update - 1:
                logger.store(LossPi=policy_loss.item(), LossQ1=q_loss_all.item() / self.num_Q,
                             LossAlpha=alpha_loss.item(), Alpha=self.alpha)


class EpochLogger:
    def __init__(self):
        self.epoch_dict = {}

    def store(self, **kwargs):
        for k, v in kwargs.items():
            self.epoch_dict.setdefault(k, []).append(v)


def redq_sac(obs_dim=3, act_dim=2, total_steps=8, seed=0):
    torch.manual_seed(seed)
    agent = REDQSACAgent(obs_dim, act_dim, act_limit=1.0)
    logger = EpochLogger()
    o = torch.randn(obs_dim)
    for t in range(total_steps):
        a = torch.rand(act_dim) * 2 - 1
        o2, r, d = torch.randn(obs_dim), float(torch.randn(())), 0.0
        agent.store_data(o, a, r, o2, d)
        agent.train(logger)
        o = o2
    return logger


if __name__ == "__main__":
    redq_sac()
