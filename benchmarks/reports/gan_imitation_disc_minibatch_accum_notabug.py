# source: https://github.com/HumanCompatibleAI/imitation/issues/866
# pattern: AdversarialTrainer.train_disc (GAIL): self._disc_opt.zero_grad() once, then one backward per minibatch from _make_disc_train_batches with the loss renormalised to the whole batch, then one self._disc_opt.step(); the user asked why the step is outside the minibatch loop: it is deliberate accumulation over one batch, cleared once per update (a stand-in of the SB3 generator with its own optimizer is in the script)
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: AGREE (clean); contributions.py: each step of the discriminator optimizer applies exactly its own two minibatch backward calls (L106); the policy optimizer only its own (L49)
import abc
from typing import Iterator, Mapping, Optional

import torch as th
import torch.nn as nn
import torch.nn.functional as F

OBS_DIM, ACT_DIM = 3, 2


class TinyPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(OBS_DIM, ACT_DIM)
        self.v = nn.Linear(OBS_DIM, 1)

    def evaluate_actions(self, obs, acts):
        mu = self.mu(obs)
        log_prob = -((acts - mu) ** 2).sum(-1)
        return self.v(obs).squeeze(-1), log_prob, None


class TinyGenAlgo:
    """Stand-in of an SB3 on-policy learner: it trains its policy with its own optimizer."""

    def __init__(self, reward_fn):
        self.policy = TinyPolicy()
        self.optimizer = th.optim.Adam(self.policy.parameters(), lr=1e-3)
        self.reward_fn = reward_fn
        self.device = "cpu"
        self.trajectories = []

    def learn(self, total_timesteps, reset_num_timesteps=False, callback=None):
        obs = th.randn(total_timesteps, OBS_DIM)
        with th.no_grad():
            acts = self.policy.mu(obs) + 0.1 * th.randn(total_timesteps, ACT_DIM)
            next_obs = obs + 0.1 * th.randn_like(obs)
            rew = self.reward_fn(obs, acts, next_obs, th.zeros(total_timesteps))
        self.optimizer.zero_grad()
        values, log_prob, _ = self.policy.evaluate_actions(obs, acts)
        adv = rew - values.detach()
        loss = -(log_prob * adv).mean() + F.mse_loss(values, rew)
        loss.backward()
        self.optimizer.step()
        self.trajectories.append({"obs": obs, "acts": acts, "next_obs": next_obs,
                                  "dones": th.zeros(total_timesteps)})


class RewardNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2 * OBS_DIM + ACT_DIM, 8), nn.Tanh(), nn.Linear(8, 1))

    def preprocess(self, obs, acts, next_obs, dones):
        return obs.float(), acts.float(), next_obs.float(), dones.float()

    def forward(self, state, action, next_state, done):
        return self.mlp(th.cat([state, action, next_state], dim=-1)).squeeze(-1)


class AdversarialTrainer(abc.ABC):
    def __init__(self, *, demonstrations, demo_batch_size, demo_minibatch_size, gen_train_timesteps,
                 n_disc_updates_per_round, disc_opt_cls=th.optim.Adam, disc_opt_kwargs=None):
        self.demo_batch_size = demo_batch_size
        self.demo_minibatch_size = demo_minibatch_size
        self.gen_train_timesteps = gen_train_timesteps
        self.n_disc_updates_per_round = n_disc_updates_per_round
        self._demonstrations = demonstrations
        self._global_step = 0
        self._disc_step = 0
        self._disc_opt = disc_opt_cls(self._reward_net.parameters(), **(disc_opt_kwargs or {}))
        self.gen_algo = TinyGenAlgo(self.reward_train_fn)
        self._gen_replay_buffer = []

    @abc.abstractmethod
    def logits_expert_is_high(self, state, action, next_state, done, log_policy_act_prob=None) -> th.Tensor:
        """Discriminator logits; high means expert-like."""

    def reward_train_fn(self, obs, acts, next_obs, dones):
        return -F.logsigmoid(-self.logits_expert_is_high(obs, acts, next_obs, dones))

    def _next_expert_batch(self) -> Mapping:
        idx = th.randint(0, len(self._demonstrations["obs"]), (self.demo_batch_size,))
        return {k: v[idx] for k, v in self._demonstrations.items()}

    def train_disc(self, *, expert_samples: Optional[Mapping] = None, gen_samples: Optional[Mapping] = None):
        # compute loss
        self._disc_opt.zero_grad()

        batch_iter = self._make_disc_train_batches(gen_samples=gen_samples, expert_samples=expert_samples)
        for batch in batch_iter:
            disc_logits = self.logits_expert_is_high(
                batch["state"], batch["action"], batch["next_state"], batch["done"],
                batch["log_policy_act_prob"],
            )
            loss = F.binary_cross_entropy_with_logits(disc_logits, batch["labels_expert_is_one"].float())
            # Renormalise the loss to be averaged over the whole batch size instead of the minibatch size.
            assert len(batch["state"]) == 2 * self.demo_minibatch_size
            loss *= self.demo_minibatch_size / self.demo_batch_size
            loss.backward()

        # do gradient step
        self._disc_opt.step()
        self._disc_step += 1
        return {"disc_loss": loss.item()}

    def train_gen(self, total_timesteps: Optional[int] = None) -> None:
        if total_timesteps is None:
            total_timesteps = self.gen_train_timesteps
        self.gen_algo.learn(total_timesteps=total_timesteps, reset_num_timesteps=False)
        self._global_step += 1
        self._gen_replay_buffer.append(self.gen_algo.trajectories.pop())

    def train(self, total_timesteps: int) -> None:
        n_rounds = total_timesteps // self.gen_train_timesteps
        for _r in range(0, n_rounds):
            self.train_gen(self.gen_train_timesteps)
            for _ in range(self.n_disc_updates_per_round):
                self._reward_net.train()
                self.train_disc()

    def _get_log_policy_act_prob(self, obs_th, acts_th):
        _, log_policy_act_prob_th, _ = self.gen_algo.policy.evaluate_actions(obs_th, acts_th)
        return log_policy_act_prob_th

    def _make_disc_train_batches(self, *, gen_samples=None, expert_samples=None) -> Iterator[Mapping[str, th.Tensor]]:
        batch_size = self.demo_batch_size
        if expert_samples is None:
            expert_samples = self._next_expert_batch()
        if gen_samples is None:
            latest = self._gen_replay_buffer[-1]
            idx = th.randint(0, len(latest["obs"]), (batch_size,))
            gen_samples = {k: v[idx] for k, v in latest.items()}

        for start in range(0, batch_size, self.demo_minibatch_size):
            end = start + self.demo_minibatch_size
            expert_batch = {k: v[start:end] for k, v in expert_samples.items()}
            gen_batch = {k: v[start:end] for k, v in gen_samples.items()}
            obs = th.cat([expert_batch["obs"], gen_batch["obs"]])
            acts = th.cat([expert_batch["acts"], gen_batch["acts"]])
            next_obs = th.cat([expert_batch["next_obs"], gen_batch["next_obs"]])
            dones = th.cat([expert_batch["dones"], gen_batch["dones"]])
            labels_expert_is_one = th.cat([th.ones(self.demo_minibatch_size, dtype=th.long),
                                           th.zeros(self.demo_minibatch_size, dtype=th.long)])
            # Calculate generator-policy log probabilities.
            with th.no_grad():
                log_policy_act_prob = self._get_log_policy_act_prob(obs, acts)
            obs_th, acts_th, next_obs_th, dones_th = self._reward_net.preprocess(obs, acts, next_obs, dones)
            yield {"state": obs_th, "action": acts_th, "next_state": next_obs_th, "done": dones_th,
                   "labels_expert_is_one": labels_expert_is_one, "log_policy_act_prob": log_policy_act_prob}


class GAIL(AdversarialTrainer):
    def __init__(self, *, reward_net, **kwargs):
        self._reward_net = reward_net
        super().__init__(**kwargs)

    def logits_expert_is_high(self, state, action, next_state, done, log_policy_act_prob=None) -> th.Tensor:
        return self._reward_net(state, action, next_state, done)


if __name__ == "__main__":
    th.manual_seed(0)
    demos = {"obs": th.randn(32, OBS_DIM), "acts": th.randn(32, ACT_DIM), "next_obs": th.randn(32, OBS_DIM),
             "dones": th.zeros(32)}
    trainer = GAIL(reward_net=RewardNet(), demonstrations=demos, demo_batch_size=8, demo_minibatch_size=4,
                   gen_train_timesteps=16, n_disc_updates_per_round=2, disc_opt_kwargs={"lr": 1e-3})
    trainer.train(total_timesteps=64)
