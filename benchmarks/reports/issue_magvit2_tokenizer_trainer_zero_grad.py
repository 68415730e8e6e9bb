# source: https://github.com/lucidrains/magvit2-pytorch/commit/dd86b76e19570b0ba8cd3714b8005c621144fb3e
# pattern: VideoTokenizerTrainer.train_step(): both optimizers are cleared only right after their own step. The tokenizer loss (VideoTokenizer.forward, return_loss) scores the reconstruction with self.discr, so discr_optimizer.step() also applies the generator's adversarial gradient; and the discriminator loss (return_discr_loss) scores the un-detached reconstruction, so its gradient sits in the tokenizer's parameters until the next train_step's optimizer.step() (accelerate replaced by a tiny stand-in; fix: zero_grad before each phase and fake.detach())
# case: bug
# expect: ZG006@261-261 ZG006@280-280
# spread: multi
# label: reading: contributions.py attributes every backward to the stand-in Accelerator.backward (L51); checked by hand that after optimizer.step() the discriminator .grad already holds the tokenizer loss (applied by discr_optimizer.step() at L280) and that every train_step after the first starts with the previous discriminator loss's gradient in the tokenizer parameters (applied by optimizer.step() at L261)
from contextlib import nullcontext
from functools import partial
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


def exists(val):
    return val is not None


def cycle(dl):
    while True:
        for data in dl:
            yield data


def accum_log(log, new_logs):
    for key, new_value in new_logs.items():
        old_value = log.get(key, 0.)
        log[key] = old_value + new_value
    return log


def get_optimizer(params, lr=3e-4, wd=0.):
    params = list(params)
    if wd == 0:
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.AdamW(params, lr=lr, weight_decay=wd)


class Accelerator:
    # stand-in for accelerate.Accelerator, single process on CPU
    device = torch.device('cpu')
    is_main_process = True
    is_local_main_process = True

    def prepare(self, *objs):
        return objs

    def backward(self, loss):
        loss.backward()

    def clip_grad_norm_(self, parameters, max_norm):
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm)

    def autocast(self):
        return nullcontext()

    def no_sync(self, model):
        return nullcontext()

    def wait_for_everyone(self):
        pass

    def print(self, msg):
        print(msg)


class VideoDataset(Dataset):
    def __init__(self, folder, image_size, num_frames=2):
        self.image_size = image_size
        self.num_frames = num_frames
        self.n = 8

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        return torch.rand(3, self.num_frames, self.image_size, self.image_size), idx


def pick_video_frame(video, frame_indices):
    batch = torch.arange(video.shape[0])[:, None]
    video = video.transpose(1, 2)[batch, frame_indices]
    return video[:, 0]


def gradient_penalty(images, output, weight=10):
    gradients = torch.autograd.grad(outputs=output, inputs=images, grad_outputs=torch.ones_like(output),
                                    create_graph=True, retain_graph=True)[0]
    gradients = gradients.reshape(images.shape[0], -1)
    return weight * ((gradients.norm(2, dim=1) - 1) ** 2).mean()


def hinge_discr_loss(fake, real):
    return (F.relu(1 + fake) + F.relu(1 - real)).mean()


def hinge_gen_loss(fake):
    return -fake.mean()


class VideoTokenizer(nn.Module):
    # stand-in: per-frame conv encoder, a nearest-code quantizer, conv decoder, a frozen VGG-like net, an image discriminator
    def __init__(self, *, image_size=8, dim=8, codebook_size=16, channels=3, use_gan=True, multiscale_discrs=tuple()):
        super().__init__()
        self.image_size = image_size
        self.conv_in = nn.Conv2d(channels, dim, 3, padding=1)
        self.codebook = nn.Parameter(torch.randn(codebook_size, dim))
        self.conv_out = nn.Conv2d(dim, channels, 3, padding=1)
        self.vgg = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU())
        self.vgg.requires_grad_(False)
        self.has_gan = use_gan
        self.discr = nn.Sequential(nn.Conv2d(channels, 4, 3, stride=2, padding=1), nn.LeakyReLU(0.1), nn.Conv2d(4, 1, 4))
        self.multiscale_discrs = nn.ModuleList([*multiscale_discrs])
        self.has_multiscale_discrs = use_gan and len(multiscale_discrs) > 0
        self.grad_penalty_loss_weight = 10.
        self.adversarial_loss_weight = 1.
        self.multiscale_adversarial_loss_weight = 1.
        self.perceptual_loss_weight = 1.
        self.quantizer_aux_loss_weight = 1.
        self.register_buffer('zero', torch.tensor(0.), persistent=False)

    def parameters(self):
        return [
            *self.conv_in.parameters(),
            *self.conv_out.parameters(),
            self.codebook,
        ]

    def discr_parameters(self):
        return self.discr.parameters()

    def quantize(self, x):
        flat = x.permute(0, 2, 3, 1)
        dist = torch.cdist(flat.reshape(flat.shape[0], -1, flat.shape[-1]), self.codebook[None].expand(flat.shape[0], -1, -1))
        q = self.codebook[dist.argmin(-1)].reshape(flat.shape)
        aux_losses = F.mse_loss(q.detach(), flat) + F.mse_loss(q, flat.detach())
        q = flat + (q - flat).detach()
        return q.permute(0, 3, 1, 2), aux_losses

    def forward(self, video, return_loss=False, return_discr_loss=False, apply_gradient_penalty=True):
        batch, channels, frames = video.shape[:3]
        frames_flat = video.transpose(1, 2).reshape(batch * frames, channels, *video.shape[-2:])
        q, aux_losses = self.quantize(self.conv_in(frames_flat))
        recon = torch.sigmoid(self.conv_out(q))
        recon_video = recon.reshape(batch, frames, channels, *video.shape[-2:]).transpose(1, 2)

        if not (return_loss or return_discr_loss):
            return recon_video

        recon_loss = F.mse_loss(video, recon_video)

        # gan discriminator loss
        if return_discr_loss:
            frame_indices = torch.randn((batch, frames)).topk(1, dim=-1).indices
            real = pick_video_frame(video, frame_indices)
            if apply_gradient_penalty:
                real = real.requires_grad_()
            fake = pick_video_frame(recon_video, frame_indices)

            real_logits = self.discr(real)
            fake_logits = self.discr(fake)
            discr_loss = hinge_discr_loss(fake_logits, real_logits)

            multiscale_discr_losses = []
            if self.has_multiscale_discrs:
                for discr in self.multiscale_discrs:
                    multiscale_discr_losses.append(hinge_discr_loss(discr(recon_video), discr(video)))
            else:
                multiscale_discr_losses.append(self.zero)

            if apply_gradient_penalty:
                gradient_penalty_loss = gradient_penalty(real, real_logits)
            else:
                gradient_penalty_loss = self.zero

            total_loss = discr_loss + \
                gradient_penalty_loss * self.grad_penalty_loss_weight + \
                sum(multiscale_discr_losses) * self.multiscale_adversarial_loss_weight
            return total_loss, SimpleNamespace(discr_loss=discr_loss, gradient_penalty=gradient_penalty_loss)

        # perceptual loss
        frame_indices = torch.randn((batch, frames)).topk(1, dim=-1).indices
        perceptual_loss = F.mse_loss(self.vgg(pick_video_frame(video, frame_indices)),
                                     self.vgg(pick_video_frame(recon_video, frame_indices)))

        # per-frame image discriminator
        if self.has_gan:
            frame_indices = torch.randn((batch, frames)).topk(1, dim=-1).indices
            recon_video_frames = pick_video_frame(recon_video, frame_indices)
            fake_logits = self.discr(recon_video_frames)
            gen_loss = hinge_gen_loss(fake_logits)
            adaptive_weight = 1.
        else:
            gen_loss = self.zero
            adaptive_weight = 0.

        total_loss = recon_loss \
            + aux_losses * self.quantizer_aux_loss_weight \
            + perceptual_loss * self.perceptual_loss_weight \
            + gen_loss * adaptive_weight * self.adversarial_loss_weight

        return total_loss, SimpleNamespace(recon_loss=recon_loss, perceptual_loss=perceptual_loss, adversarial_gen_loss=gen_loss)


class VideoTokenizerTrainer(nn.Module):
    def __init__(self, model, *, batch_size, num_train_steps, learning_rate=1e-5, grad_accum_every=1,
                 apply_gradient_penalty_every=4, max_grad_norm=None, dataset_folder='./videos', num_frames=2):
        super().__init__()
        self.accelerator = Accelerator()
        self.model = model
        self.grad_accum_every = grad_accum_every
        self.num_train_steps = num_train_steps
        self.max_grad_norm = max_grad_norm
        self.apply_gradient_penalty_every = apply_gradient_penalty_every
        self.register_buffer('step', torch.tensor(0))

        self.dataset = VideoDataset(dataset_folder, model.image_size, num_frames=num_frames)
        self.dataloader = DataLoader(self.dataset, batch_size=batch_size, shuffle=True)

        # optimizers
        self.optimizer = get_optimizer(model.parameters(), lr=learning_rate)
        self.discr_optimizer = get_optimizer(model.discr_parameters(), lr=learning_rate)

        (self.model, self.dataloader, self.optimizer, self.discr_optimizer) = self.accelerator.prepare(
            self.model, self.dataloader, self.optimizer, self.discr_optimizer)

        # multiscale discr losses
        self.has_multiscale_discrs = self.model.has_multiscale_discrs
        self.multiscale_discr_optimizers = []
        for ind, discr in enumerate(self.model.multiscale_discrs):
            multiscale_optimizer = get_optimizer(discr.parameters(), lr=learning_rate)
            self.multiscale_discr_optimizers.append(multiscale_optimizer)

    def log(self, **data_kwargs):
        pass

    def print(self, msg):
        self.accelerator.print(msg)

    def train_step(self, dl_iter):
        self.model.train()
        step = self.step.item()

        # main model
        for grad_accum_step in range(self.grad_accum_every):
            is_last = grad_accum_step == (self.grad_accum_every - 1)
            context = partial(self.accelerator.no_sync, self.model) if not is_last else nullcontext
            data, *_ = next(dl_iter)
            with self.accelerator.autocast(), context():
                loss, loss_breakdown = self.model(data, return_loss=True)
                self.accelerator.backward(loss / self.grad_accum_every)

        self.log(total_loss=loss.item(), recon_loss=loss_breakdown.recon_loss.item())
        self.print(f'recon loss: {loss_breakdown.recon_loss.item():.3f}')

        if exists(self.max_grad_norm):
            self.accelerator.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)

        self.optimizer.step()
        self.optimizer.zero_grad()

        # discriminator and multiscale discriminators
        apply_gradient_penalty = not (step % self.apply_gradient_penalty_every)

        for grad_accum_step in range(self.grad_accum_every):
            is_last = grad_accum_step == (self.grad_accum_every - 1)
            context = partial(self.accelerator.no_sync, self.model) if not is_last else nullcontext
            data, *_ = next(dl_iter)
            with self.accelerator.autocast(), context():
                discr_loss, discr_loss_breakdown = self.model(data, return_discr_loss=True, apply_gradient_penalty=apply_gradient_penalty)
                self.accelerator.backward(discr_loss / self.grad_accum_every)

        self.print(f'discr loss: {discr_loss_breakdown.discr_loss.item():.3f}')

        if exists(self.max_grad_norm):
            self.accelerator.clip_grad_norm_(self.model.discr_parameters(), self.max_grad_norm)

        self.discr_optimizer.step()
        self.discr_optimizer.zero_grad()

        if self.has_multiscale_discrs:
            for multiscale_discr_optimizer in self.multiscale_discr_optimizers:
                multiscale_discr_optimizer.step()
                multiscale_discr_optimizer.zero_grad()

        # update train step
        self.step.add_(1)

    def train(self):
        step = self.step.item()
        dl_iter = cycle(self.dataloader)
        while step < self.num_train_steps:
            self.train_step(dl_iter)
            self.accelerator.wait_for_everyone()
            step += 1
        self.print('training complete')


if __name__ == '__main__':
    torch.manual_seed(0)
    tokenizer = VideoTokenizer(image_size=8, dim=8, codebook_size=16)
    trainer = VideoTokenizerTrainer(tokenizer, batch_size=2, num_train_steps=3, grad_accum_every=2, learning_rate=1e-3)
    trainer.train()
