# source: https://github.com/Shark-NLP/DiffuSeq/issues/49
# pattern: TrainLoop.run_step calls forward_backward, which clears once through the module-level zero_grad(self.model_params) helper and then backpropagates every micro-batch of the batch, and then optimize_normal steps the AdamW over the same params once; the asker took the per-micro-batch backward for a mistake, the answer: micro-batches only save memory, the gradients add up to the batch's (not a bug)
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean
import copy
import functools
import math

import torch as th
import torch.nn as nn
from torch.optim import AdamW

th.manual_seed(0)


def zero_grad(model_params):
    for param in model_params:
        if param.grad is not None:
            param.grad.detach_()
            param.grad.zero_()


def update_ema(target_params, source_params, rate=0.99):
    for targ, src in zip(target_params, source_params):
        targ.detach().mul_(rate).add_(src.detach(), alpha=1 - rate)


def log_loss_dict(diffusion, ts, losses):
    return {key: values.mean().item() for key, values in losses.items()}


class UniformSampler:
    def __init__(self, diffusion):
        self.diffusion = diffusion
        self._weights = th.ones(diffusion.num_timesteps)

    def sample(self, batch_size, device):
        p = self._weights / self._weights.sum()
        indices = th.multinomial(p, batch_size, replacement=True).to(device)
        weights = th.ones(batch_size, device=device)
        return indices, weights


class GaussianDiffusion:
    def __init__(self, num_timesteps):
        self.num_timesteps = num_timesteps
        self.alphas = th.linspace(0.99, 0.5, num_timesteps)

    def training_losses(self, model, x_start, t, model_kwargs=None):
        noise = th.randn_like(x_start)
        a = self.alphas[t].view(-1, 1, 1)
        x_t = a.sqrt() * x_start + (1 - a).sqrt() * noise
        model_output = model(x_t, t, **(model_kwargs or {}))
        mse = ((model_output - x_start) ** 2).mean(dim=(1, 2))
        return {"loss": mse, "mse": mse}


class TransformerNetModel(nn.Module):
    def __init__(self, hidden_dim, vocab_size):
        super().__init__()
        self.word_embedding = nn.Embedding(vocab_size, hidden_dim)
        self.time_embed = nn.Linear(1, hidden_dim)
        self.output = nn.Linear(hidden_dim, hidden_dim)

    def forward(self, x, timesteps, input_ids=None, input_mask=None):
        emb_t = self.time_embed(timesteps.float().view(-1, 1, 1))
        h = x + emb_t + self.word_embedding(input_ids) * input_mask.unsqueeze(-1)
        return self.output(th.tanh(h))


class TrainLoop:
    def __init__(self, *, model, diffusion, data, batch_size, microbatch, lr, ema_rate,
                 log_interval, save_interval, use_fp16=False, schedule_sampler=None,
                 weight_decay=0.0, learning_steps=0, gradient_clipping=-1.):
        self.model = model
        self.diffusion = diffusion
        self.data = data
        self.batch_size = batch_size
        self.microbatch = microbatch if microbatch > 0 else batch_size
        self.lr = lr
        self.ema_rate = [ema_rate] if isinstance(ema_rate, float) else [float(x) for x in ema_rate.split(",")]
        self.log_interval = log_interval
        self.save_interval = save_interval
        self.use_fp16 = use_fp16
        self.schedule_sampler = schedule_sampler or UniformSampler(diffusion)
        self.weight_decay = weight_decay
        self.learning_steps = learning_steps
        self.gradient_clipping = gradient_clipping

        self.step = 0
        self.resume_step = 0
        self.model_params = list(self.model.parameters())
        self.master_params = self.model_params

        self.opt = AdamW(self.master_params, lr=self.lr, weight_decay=self.weight_decay)
        self.ema_params = [copy.deepcopy(self.master_params) for _ in range(len(self.ema_rate))]
        self.use_ddp = False
        self.ddp_model = self.model

    def run_loop(self):
        while not self.learning_steps or self.step + self.resume_step < self.learning_steps:
            batch, cond = next(self.data)
            self.run_step(batch, cond)
            self.step += 1

    def run_step(self, batch, cond):
        self.forward_backward(batch, cond)
        self.optimize_normal()
        self.log_step()

    def forward_backward(self, batch, cond):
        zero_grad(self.model_params)
        for i in range(0, batch.shape[0], self.microbatch):
            micro = batch[i: i + self.microbatch]
            micro_cond = {k: v[i: i + self.microbatch] for k, v in cond.items()}
            last_batch = (i + self.microbatch) >= batch.shape[0]
            t, weights = self.schedule_sampler.sample(micro.shape[0], micro.device)
            compute_losses = functools.partial(
                self.diffusion.training_losses,
                self.ddp_model,
                micro,
                t,
                model_kwargs=micro_cond,
            )
            if last_batch or not self.use_ddp:
                losses = compute_losses()
            else:
                with self.ddp_model.no_sync():
                    losses = compute_losses()

            loss = (losses["loss"] * weights).mean()
            log_loss_dict(self.diffusion, t, {k: v * weights for k, v in losses.items()})
            loss.backward()

    def grad_clip(self):
        max_grad_norm = self.gradient_clipping
        th.nn.utils.clip_grad_norm_(self.model.parameters(), max_grad_norm)

    def optimize_normal(self):
        if self.gradient_clipping > 0:
            self.grad_clip()
        self._log_grad_norm()
        self._anneal_lr()
        self.opt.step()
        for rate, params in zip(self.ema_rate, self.ema_params):
            update_ema(params, self.master_params, rate=rate)

    def _log_grad_norm(self):
        sqsum = 0.0
        for p in self.master_params:
            if p.grad is not None:
                sqsum += (p.grad ** 2).sum().item()
        return math.sqrt(sqsum)

    def _anneal_lr(self):
        if not self.learning_steps:
            return
        frac_done = (self.step + self.resume_step) / self.learning_steps
        lr = self.lr * (1 - frac_done)
        for param_group in self.opt.param_groups:
            param_group["lr"] = lr

    def log_step(self):
        pass


def load_data_text(batch_size, seq_len, hidden_dim, vocab_size):
    while True:
        batch = th.randn(batch_size, seq_len, hidden_dim)
        cond = {
            "input_ids": th.randint(0, vocab_size, (batch_size, seq_len)),
            "input_mask": th.ones(batch_size, seq_len),
        }
        yield batch, cond


if __name__ == "__main__":
    hidden_dim, vocab_size = 4, 11
    model = TransformerNetModel(hidden_dim, vocab_size)
    diffusion = GaussianDiffusion(num_timesteps=10)
    TrainLoop(
        model=model,
        diffusion=diffusion,
        data=load_data_text(batch_size=6, seq_len=3, hidden_dim=hidden_dim, vocab_size=vocab_size),
        batch_size=6,
        microbatch=2,
        lr=1e-4,
        ema_rate="0.9999",
        log_interval=10,
        save_interval=100,
        learning_steps=4,
        gradient_clipping=-1.,
    ).run_loop()
