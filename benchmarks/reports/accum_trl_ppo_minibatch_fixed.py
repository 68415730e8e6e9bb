# source: https://github.com/huggingface/trl/pull/546
# pattern: the fix: train_minibatch steps and then clears the prepared optimizer after every minibatch inside accelerator.accumulate, and the prepared optimizer (a stand-in of accelerate's, written here: step and zero_grad act only when sync_gradients) turns both into one step and one clear per window
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean
import contextlib
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


# --- a tiny stand-in of accelerate (the gating its docs describe) -------------------------
class GradientState:
    def __init__(self, num_steps):
        self.num_steps = num_steps
        self.sync_gradients = True


class AcceleratedOptimizer(torch.optim.Optimizer):
    def __init__(self, optimizer, gradient_state):
        self.optimizer = optimizer
        self.gradient_state = gradient_state
        self.param_groups = optimizer.param_groups
        self.defaults = optimizer.defaults
        self.state = optimizer.state

    def zero_grad(self, set_to_none=None):
        if self.gradient_state.sync_gradients:
            self.optimizer.zero_grad()

    def step(self, closure=None):
        if self.gradient_state.sync_gradients:
            self.optimizer.step(closure)


class Accelerator:
    def __init__(self, gradient_accumulation_steps=1):
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.gradient_state = GradientState(gradient_accumulation_steps)
        self.step = 0
        self.num_processes = 1
        self.device = torch.device("cpu")

    @property
    def sync_gradients(self):
        return self.gradient_state.sync_gradients

    def prepare(self, model, optimizer):
        return model, AcceleratedOptimizer(optimizer, self.gradient_state)

    @contextlib.contextmanager
    def accumulate(self, model):
        self.step += 1
        self.gradient_state.sync_gradients = self.step % self.gradient_state.num_steps == 0
        yield

    def backward(self, loss):
        (loss / self.gradient_accumulation_steps).backward()
# ---------------------------------------------------------------------------------------------


def masked_mean(values, mask):
    return (values * mask).sum() / mask.sum()


def masked_whiten(values, mask):
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    return (values - mean) * torch.rsqrt(var + 1e-8)


def clip_by_value(x, tensor_min, tensor_max):
    return torch.max(torch.min(x, tensor_max), tensor_min)


def logprobs_from_logits(logits, labels):
    logp = F.log_softmax(logits, dim=2)
    return torch.gather(logp, 2, labels.unsqueeze(2)).squeeze(-1)


class AutoModelForCausalLMWithValueHead(nn.Module):
    def __init__(self, vocab_size, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden)
        self.body = nn.Linear(hidden, hidden)
        self.lm_head = nn.Linear(hidden, vocab_size)
        self.v_head = nn.Linear(hidden, 1)

    def forward(self, input_ids):
        h = torch.tanh(self.body(self.embed(input_ids)))
        return self.lm_head(h), None, self.v_head(h).squeeze(-1)


@dataclass
class PPOConfig:
    learning_rate: float = 1e-3
    batch_size: int = 4
    mini_batch_size: int = 1
    gradient_accumulation_steps: int = 2
    ppo_epochs: int = 2
    gamma: float = 1.0
    lam: float = 0.95
    cliprange: float = 0.2
    cliprange_value: float = 0.2
    vf_coef: float = 0.1
    max_grad_norm: float = 1.0
    early_stopping: bool = False


class PPOTrainer:
    def __init__(self, config, model, ref_model, optimizer=None):
        self.config = config
        self.accelerator = Accelerator(gradient_accumulation_steps=config.gradient_accumulation_steps)
        self.model = model
        self.ref_model = ref_model
        if optimizer is None:
            self.optimizer = torch.optim.Adam(
                filter(lambda p: p.requires_grad, self.model.parameters()),
                lr=self.config.learning_rate,
            )
        else:
            self.optimizer = optimizer
        self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)

    def batched_forward_pass(self, model, queries, responses):
        input_ids = torch.cat([queries, responses], dim=1)
        logits, _, values = model(input_ids)
        q = queries.shape[1]
        logprobs = logprobs_from_logits(logits[:, q - 1:-1, :], responses)
        return logprobs, logits[:, q - 1:-1, :], values[:, q - 1:-1], torch.ones_like(logprobs)

    def compute_rewards(self, scores, logprobs, ref_logprobs, masks):
        rewards = -0.1 * (logprobs - ref_logprobs)
        rewards[:, -1] += scores
        return rewards

    def loss(self, old_logprobs, values, rewards, logits, vpreds, logprobs, mask):
        lastgaelam = 0
        advantages_reversed = []
        gen_len = rewards.shape[-1]
        values = values * mask
        rewards = rewards * mask
        for t in reversed(range(gen_len)):
            nextvalues = values[:, t + 1] if t < gen_len - 1 else 0.0
            delta = rewards[:, t] + self.config.gamma * nextvalues - values[:, t]
            lastgaelam = delta + self.config.gamma * self.config.lam * lastgaelam
            advantages_reversed.append(lastgaelam)
        advantages = torch.stack(advantages_reversed[::-1]).transpose(0, 1)
        returns = advantages + values
        advantages = masked_whiten(advantages, mask).detach()

        vpredclipped = clip_by_value(vpreds, values - self.config.cliprange_value,
                                     values + self.config.cliprange_value)
        vf_losses1 = (vpreds - returns) ** 2
        vf_losses2 = (vpredclipped - returns) ** 2
        vf_loss = 0.5 * masked_mean(torch.max(vf_losses1, vf_losses2), mask)

        ratio = torch.exp(logprobs - old_logprobs)
        pg_losses = -advantages * ratio
        pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - self.config.cliprange, 1.0 + self.config.cliprange)
        pg_loss = masked_mean(torch.max(pg_losses, pg_losses2), mask)
        stats = {"policy/policykl": masked_mean(old_logprobs - logprobs, mask).detach()}
        return pg_loss, self.config.vf_coef * vf_loss, stats

    def step(self, queries, responses, scores):
        with torch.no_grad():
            all_logprobs, _, values, masks = self.batched_forward_pass(self.model, queries, responses)
            ref_logprobs, _, _, _ = self.batched_forward_pass(self.ref_model, queries, responses)
            rewards = self.compute_rewards(scores, all_logprobs, ref_logprobs, masks)

        all_stats = []
        for _ in range(self.config.ppo_epochs):
            perm = torch.randperm(self.config.batch_size)
            mini_batches = [perm[j:j + self.config.mini_batch_size]
                            for j in range(0, self.config.batch_size, self.config.mini_batch_size)]
            for i, inds in enumerate(mini_batches):
                with self.accelerator.accumulate(self.model):
                    logprobs, logits, vpreds, _ = self.batched_forward_pass(
                        self.model, queries[inds], responses[inds])
                    train_stats = self.train_minibatch(
                        all_logprobs[inds], values[inds], rewards[inds],
                        logprobs, logits, vpreds, masks[inds],
                    )
                    all_stats.append(train_stats)
        return all_stats

    def train_minibatch(self, old_logprobs, values, rewards, logprobs, logits, vpreds, mask):
        loss_p, loss_v, train_stats = self.loss(old_logprobs, values, rewards, logits, vpreds, logprobs, mask)
        loss = loss_p + loss_v
        self.accelerator.backward(loss)
        if self.config.max_grad_norm is not None:
            if self.accelerator.sync_gradients:
                torch.nn.utils.clip_grad_norm_(
                    filter(lambda p: p.requires_grad, self.model.parameters()),
                    self.config.max_grad_norm,
                )
        self.optimizer.step()
        # we call optimizer.zero_grad() every time and let the accelerator handle accumulation
        self.optimizer.zero_grad()
        return train_stats


if __name__ == "__main__":
    config = PPOConfig()
    model = AutoModelForCausalLMWithValueHead(vocab_size=8, hidden=8)
    ref_model = AutoModelForCausalLMWithValueHead(vocab_size=8, hidden=8)
    for p in ref_model.parameters():
        p.requires_grad_(False)
    ppo_trainer = PPOTrainer(config, model, ref_model)
    for _ in range(2):
        queries = torch.randint(0, 8, (config.batch_size, 2))
        responses = torch.randint(0, 8, (config.batch_size, 3))
        scores = torch.randn(config.batch_size)
        ppo_trainer.step(queries, responses, scores)
