# source: https://github.com/lucidrains/phenaki-pytorch/commit/3c33570ce43f652a7d43fa3e6023f51bc5e69184
# pattern: CViViTTrainer.train_step(): the vae (generator) loss computed in CViViT.forward includes gen_loss(self.discr(recon)), so its backward also fills the discriminator's .grad; discr_optim is cleared only right after its own step, so the discriminator's step applies the generator's adversarial gradient with its own loss (accelerate replaced by a tiny stand-in; fix: clear discr_optim before the discriminator's accumulation loop)
# case: bug
# expect: ZG006@240-240
# spread: multi
# label: reading: contributions.py attributes every backward to the stand-in Accelerator.backward (L49), so it cannot tell the losses apart; checked by hand that right after self.optim.step() the discriminator .grad already holds the vae loss (gen_loss through self.discr), which discr_optim.step() at L240 then applies with its own loss
from contextlib import nullcontext

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

    def print(self, msg):
        print(msg)


class ImageDataset(Dataset):
    def __init__(self, folder, image_size):
        self.image_size = image_size
        self.n = 8

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        return torch.rand(3, self.image_size, self.image_size)


def pick_video_frame(video, frame_indices):
    batch = torch.arange(video.shape[0])[:, None]
    video = video.transpose(1, 2)[batch, frame_indices]
    return video[:, 0]


def grad_layer_wrt_loss(loss, layer):
    return torch.autograd.grad(outputs=loss, inputs=layer, grad_outputs=torch.ones_like(loss), retain_graph=True)[0].detach()


def gradient_penalty(images, output, weight=10):
    gradients = torch.autograd.grad(outputs=output, inputs=images, grad_outputs=torch.ones_like(output),
                                    create_graph=True, retain_graph=True)[0]
    gradients = gradients.reshape(images.shape[0], -1)
    return weight * ((gradients.norm(2, dim=1) - 1) ** 2).mean()


def hinge_discr_loss(fake, real):
    return (F.relu(1 + fake) + F.relu(1 - real)).mean()


def hinge_gen_loss(fake):
    return -fake.mean()


class CViViT(nn.Module):
    # stand-in: patch embedding, a nearest-code quantizer, a pixel head, a VGG-like frozen feature net and a discriminator
    def __init__(self, *, dim=8, codebook_size=16, image_size=8, patch_size=4, channels=3, use_vgg_and_gan=True):
        super().__init__()
        self.image_size = (image_size, image_size)
        self.patch_size = patch_size
        self.to_patch_emb = nn.Linear(channels * patch_size * patch_size, dim)
        self.codebook = nn.Parameter(torch.randn(codebook_size, dim))
        self.to_pixels = nn.Sequential(nn.Linear(dim, channels * patch_size * patch_size))
        self.use_vgg_and_gan = use_vgg_and_gan
        self.vgg = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU())
        self.vgg.requires_grad_(False)
        self.discr = nn.Sequential(nn.Conv2d(channels, 4, 3, stride=2, padding=1), nn.LeakyReLU(0.1), nn.Conv2d(4, 1, 4))
        self.discr_loss = hinge_discr_loss
        self.gen_loss = hinge_gen_loss

    def vq(self, tokens):
        dist = torch.cdist(tokens, self.codebook[None].expand(tokens.shape[0], -1, -1))
        indices = dist.argmin(-1)
        quantized = self.codebook[indices]
        commit_loss = F.mse_loss(quantized.detach(), tokens) + F.mse_loss(quantized, tokens.detach())
        quantized = tokens + (quantized - tokens).detach()
        return quantized, indices, commit_loss

    def forward(self, video, return_recons_only=False, return_discr_loss=False, apply_grad_penalty=True):
        if video.ndim == 4:
            video = video[:, :, None]
        b, c, f, h, w = video.shape
        p = self.patch_size
        patches = video[:, :, 0].unfold(2, p, p).unfold(3, p, p)
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)
        tokens = self.to_patch_emb(patches)
        tokens, indices, commit_loss = self.vq(tokens)
        pixels = self.to_pixels(tokens).reshape(b, h // p, w // p, c, p, p)
        recon_video = pixels.permute(0, 3, 1, 4, 2, 5).reshape(b, c, 1, h, w)

        if return_recons_only:
            return recon_video[:, :, 0]

        recon_loss = F.mse_loss(video, recon_video)
        frame_indices = torch.randn(b, f).topk(1, dim=-1).indices

        if return_discr_loss:
            video = pick_video_frame(video, frame_indices)
            recon_video = pick_video_frame(recon_video, frame_indices)

            recon_video = recon_video.detach()
            video.requires_grad_()

            recon_video_discr_logits, video_discr_logits = map(self.discr, (recon_video, video))
            discr_loss = self.discr_loss(recon_video_discr_logits, video_discr_logits)

            loss = discr_loss
            if apply_grad_penalty:
                gp = gradient_penalty(video, video_discr_logits)
                loss = discr_loss + gp
            return loss

        if not self.use_vgg_and_gan:
            return recon_loss

        input_vgg_input = pick_video_frame(video, frame_indices)
        recon_vgg_input = pick_video_frame(recon_video, frame_indices)
        perceptual_loss = F.mse_loss(self.vgg(input_vgg_input), self.vgg(recon_vgg_input))

        gen_loss = self.gen_loss(self.discr(recon_vgg_input))

        last_dec_layer = self.to_pixels[0].weight
        norm_grad_wrt_gen_loss = grad_layer_wrt_loss(gen_loss, last_dec_layer).norm(p=2)
        norm_grad_wrt_perceptual_loss = grad_layer_wrt_loss(perceptual_loss, last_dec_layer).norm(p=2)
        adaptive_weight = (norm_grad_wrt_perceptual_loss / norm_grad_wrt_gen_loss.clamp(min=1e-8)).clamp(max=1e4)

        return recon_loss + perceptual_loss + commit_loss + adaptive_weight * gen_loss


class CViViTTrainer(nn.Module):
    def __init__(self, vae, *, num_train_steps, batch_size, folder, lr=3e-4, grad_accum_every=1, wd=0.,
                 max_grad_norm=0.5, discr_max_grad_norm=None, apply_grad_penalty_every=4):
        super().__init__()
        image_size = vae.image_size[0]
        self.accelerator = Accelerator()
        self.vae = vae
        self.register_buffer('steps', torch.Tensor([0]))
        self.num_train_steps = num_train_steps
        self.batch_size = batch_size
        self.grad_accum_every = grad_accum_every

        all_parameters = set(vae.parameters())
        discr_parameters = set(vae.discr.parameters())
        vae_parameters = all_parameters - discr_parameters

        self.optim = get_optimizer(vae_parameters, lr=lr, wd=wd)
        self.discr_optim = get_optimizer(discr_parameters, lr=lr, wd=wd)

        self.max_grad_norm = max_grad_norm
        self.discr_max_grad_norm = discr_max_grad_norm

        self.ds = ImageDataset(folder, image_size)
        self.dl = DataLoader(self.ds, batch_size=batch_size, shuffle=True)

        self.vae, self.optim, self.discr_optim, self.dl = self.accelerator.prepare(self.vae, self.optim, self.discr_optim, self.dl)
        self.dl_iter = cycle(self.dl)
        self.apply_grad_penalty_every = apply_grad_penalty_every

    @property
    def device(self):
        return self.accelerator.device

    def train_step(self):
        device = self.device
        steps = int(self.steps.item())
        apply_grad_penalty = not (steps % self.apply_grad_penalty_every)
        self.vae.train()
        logs = {}

        # update vae (generator)
        for _ in range(self.grad_accum_every):
            img = next(self.dl_iter)
            img = img.to(device)
            with self.accelerator.autocast():
                loss = self.vae(img, apply_grad_penalty=apply_grad_penalty)
            self.accelerator.backward(loss / self.grad_accum_every)
            accum_log(logs, {'loss': loss.item() / self.grad_accum_every})

        if exists(self.max_grad_norm):
            self.accelerator.clip_grad_norm_(self.vae.parameters(), self.max_grad_norm)

        self.optim.step()
        self.optim.zero_grad()

        # update discriminator
        if exists(self.vae.discr):
            for _ in range(self.grad_accum_every):
                img = next(self.dl_iter)
                img = img.to(device)
                loss = self.vae(img, return_discr_loss=True)
                self.accelerator.backward(loss / self.grad_accum_every)
                accum_log(logs, {'discr_loss': loss.item() / self.grad_accum_every})

            if exists(self.discr_max_grad_norm):
                self.accelerator.clip_grad_norm_(self.vae.discr.parameters(), self.discr_max_grad_norm)

            self.discr_optim.step()
            self.discr_optim.zero_grad()

            self.accelerator.print(f"{steps}: vae loss: {logs['loss']} - discr loss: {logs['discr_loss']}")

        self.steps += 1
        return logs

    def train(self, log_fn=lambda logs: None):
        while self.steps < self.num_train_steps:
            logs = self.train_step()
            log_fn(logs)
        self.accelerator.print('training complete')


if __name__ == '__main__':
    torch.manual_seed(0)
    vae = CViViT(dim=8, codebook_size=16, image_size=8, patch_size=4)
    trainer = CViViTTrainer(vae, num_train_steps=4, batch_size=2, folder='./images', grad_accum_every=2)
    trainer.train()
