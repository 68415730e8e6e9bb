# source: https://github.com/lucidrains/parti-pytorch/commit/faf615e9c46d8d34c5842d79b32b8d0124c4314d
# pattern: VQGanVAETrainer.train_step(): the autoencoder loss that VitVQGanVAE.forward returns includes gen_loss(self.discr(fmap)), so its backward also fills the discriminator's .grad; self.optim (all vae parameters minus the discriminator's) is cleared after its step, discr_optim only after its own step, so each discriminator step applies the generator's adversarial gradient with its own loss (fix: discr_optim.zero_grad() before the discriminator's accumulation loop; einops, vector-quantize and ema-pytorch replaced by tiny stand-ins)
# case: bug
# expect: ZG006@324-324
# spread: multi
# label: contributions.py: optimizer #1 (discr_optim) steps apply the autoencoder loss backward at L302 (gen_loss through self.discr) besides the discriminator loss backward at L320; oracle.py has no kind for this (DISAGREE)
import copy
from math import sqrt

import torch
import torch.nn.functional as F
from torch import nn
from torch.amp import GradScaler, autocast
from torch.autograd import grad as torch_grad
from torch.utils.data import DataLoader, Dataset, random_split

# helpers


def exists(val):
    return val is not None


def noop(*args, **kwargs):
    pass


def cycle(dl):
    while True:
        for data in dl:
            yield data


def accum_log(log, new_logs):
    for key, new_value in new_logs.items():
        old_value = log.get(key, 0.)
        log[key] = old_value + new_value
    return log


def log(t, eps=1e-10):
    return torch.log(t + eps)


def gradient_penalty(images, output, weight=10):
    gradients = torch_grad(outputs=output, inputs=images,
                           grad_outputs=torch.ones(output.size(), device=images.device),
                           create_graph=True, retain_graph=True, only_inputs=True)[0]
    gradients = gradients.reshape(images.shape[0], -1)
    return weight * ((gradients.norm(2, dim=1) - 1) ** 2).mean()


def leaky_relu(p=0.1):
    return nn.LeakyReLU(0.1)


def safe_div(numer, denom, eps=1e-8):
    return numer / (denom + eps)


def hinge_discr_loss(fake, real):
    return (F.relu(1 + fake) + F.relu(1 - real)).mean()


def hinge_gen_loss(fake):
    return -fake.mean()


def grad_layer_wrt_loss(loss, layer):
    return torch_grad(outputs=loss, inputs=layer, grad_outputs=torch.ones_like(loss),
                      retain_graph=True)[0].detach()


def get_optimizer(params, lr=3e-4, wd=0., betas=(0.9, 0.99), eps=1e-8):
    if wd == 0:
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)
    return torch.optim.AdamW(params, lr=lr, weight_decay=wd, betas=betas, eps=eps)


class EMA(nn.Module):
    """stand-in for ema_pytorch.EMA"""

    def __init__(self, model, beta=0.995, update_after_step=500, update_every=10):
        super().__init__()
        self.ema_model = copy.deepcopy(model)
        self.ema_model.requires_grad_(False)
        self.beta = beta
        self.update_after_step = update_after_step
        self.update_every = update_every
        self.step = 0

    @torch.no_grad()
    def update(self):
        self.step += 1
        if self.step % self.update_every or self.step <= self.update_after_step:
            return
        for ema_p, p in zip(self.ema_model.parameters(), self.online_params()):
            ema_p.lerp_(p, 1 - self.beta)

    def online_params(self):
        return []


class VQ(nn.Module):
    """stand-in for vector_quantize_pytorch.VectorQuantize(accept_image_fmap=True)"""

    def __init__(self, dim, codebook_size, commitment_weight=1.):
        super().__init__()
        self.codebook = nn.Parameter(torch.randn(codebook_size, dim))
        self.commitment_weight = commitment_weight

    def forward(self, fmap):
        b, c, h, w = fmap.shape
        x = fmap.permute(0, 2, 3, 1).reshape(-1, c)
        indices = torch.cdist(x, self.codebook).argmin(dim=-1)
        quantized = self.codebook[indices]
        commit_loss = F.mse_loss(quantized.detach(), x) * self.commitment_weight
        quantized = x + (quantized - x).detach()
        quantized = quantized.reshape(b, h, w, c).permute(0, 3, 1, 2)
        return quantized, indices.reshape(b, h, w), commit_loss


# dataset


class ImageDataset(Dataset):
    """stand-in: random images instead of a folder of files"""

    def __init__(self, folder, image_size, num_images=12):
        super().__init__()
        self.folder = folder
        self.image_size = image_size
        self.images = torch.rand(num_images, 3, image_size, image_size)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index]


# model


class Discriminator(nn.Module):
    def __init__(self, dims, channels=3):
        super().__init__()
        init_dim, *_, final_dim = dims
        dim_pairs = zip(dims[:-1], dims[1:])

        self.layers = nn.ModuleList([nn.Sequential(nn.Conv2d(channels, init_dim, 3, padding=1), leaky_relu())])
        for dim_in, dim_out in dim_pairs:
            self.layers.append(nn.Sequential(nn.Conv2d(dim_in, dim_out, 4, stride=2, padding=1), leaky_relu()))

        self.to_logits = nn.Sequential(nn.Conv2d(final_dim, final_dim, 1), leaky_relu(), nn.Conv2d(final_dim, 1, 2))

    def forward(self, x):
        for net in self.layers:
            x = net(x)
        return self.to_logits(x)


class ViTEncDec(nn.Module):
    def __init__(self, dim, image_size, channels=3, patch_size=4):
        super().__init__()
        self.encoded_dim = dim
        self.patch_size = patch_size
        input_dim = channels * (patch_size ** 2)

        self.encoder = nn.Sequential(nn.Conv2d(channels, dim, patch_size, stride=patch_size), nn.GELU())
        self.decoder = nn.Sequential(
            nn.Sequential(nn.Conv2d(dim, dim, 1), nn.GELU()),
            nn.Sequential(nn.Conv2d(dim, dim * 4, 3, bias=False, padding=1), nn.Tanh(),
                          nn.Conv2d(dim * 4, input_dim, 1, bias=False)),
            nn.PixelShuffle(patch_size),
        )

    @property
    def last_dec_layer(self):
        return self.decoder[-2][-1].weight

    def encode(self, x):
        return self.encoder(x)

    def decode(self, x):
        return self.decoder(x)


class VitVQGanVAE(nn.Module):
    def __init__(self, *, dim, image_size, channels=3, vq_codebook_size=16, discr_layers=2):
        super().__init__()
        self.image_size = image_size
        self.channels = channels
        self.enc_dec = ViTEncDec(dim=dim, image_size=image_size, channels=channels)
        self.vq = VQ(dim=self.enc_dec.encoded_dim, codebook_size=vq_codebook_size)
        self.recon_loss_fn = F.l1_loss

        # perceptual loss (stand-in for a truncated vgg16)
        self.vgg = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.ReLU(), nn.Flatten())

        # gan related losses
        layer_dims = [dim * 2 ** t for t in range(discr_layers)]
        self.discr = Discriminator(dims=(dim, *layer_dims), channels=channels)
        self.discr_loss = hinge_discr_loss
        self.gen_loss = hinge_gen_loss

    def encode(self, fmap):
        fmap = self.enc_dec.encode(fmap)
        return self.vq(fmap)

    def decode(self, fmap):
        return self.enc_dec.decode(fmap)

    def forward(self, img, return_loss=False, return_discr_loss=False, apply_grad_penalty=True):
        fmap, indices, commit_loss = self.encode(img)
        fmap = self.decode(fmap)

        if not return_loss and not return_discr_loss:
            return fmap

        if return_discr_loss:
            fmap.detach_()
            img.requires_grad_()
            fmap_discr_logits, img_discr_logits = map(self.discr, (fmap, img))
            loss = self.discr_loss(fmap_discr_logits, img_discr_logits)
            if apply_grad_penalty:
                loss = loss + gradient_penalty(img, img_discr_logits)
            return loss

        recon_loss = self.recon_loss_fn(fmap, img)
        perceptual_loss = F.mse_loss(self.vgg(img), self.vgg(fmap))

        # generator loss
        gen_loss = self.gen_loss(self.discr(fmap))

        # adaptive weight
        last_dec_layer = self.enc_dec.last_dec_layer
        norm_grad_wrt_gen_loss = grad_layer_wrt_loss(gen_loss, last_dec_layer).norm(p=2)
        norm_grad_wrt_perceptual_loss = grad_layer_wrt_loss(perceptual_loss, last_dec_layer).norm(p=2)
        adaptive_weight = safe_div(norm_grad_wrt_perceptual_loss, norm_grad_wrt_gen_loss)
        adaptive_weight.clamp_(max=1e4)

        return recon_loss + perceptual_loss + commit_loss + adaptive_weight * gen_loss


# main trainer class


class VQGanVAETrainer(nn.Module):
    def __init__(self, vae, *, num_train_steps, batch_size, folder, lr=3e-4, grad_accum_every=1, wd=0.,
                 save_results_every=100, valid_frac=0.05, random_split_seed=42, apply_grad_penalty_every=4,
                 amp=False):
        super().__init__()
        image_size = vae.image_size

        self.vae = vae
        self.ema_vae = EMA(vae)

        self.register_buffer('steps', torch.Tensor([0]))

        self.num_train_steps = num_train_steps
        self.batch_size = batch_size
        self.grad_accum_every = grad_accum_every

        all_parameters = set(vae.parameters())
        discr_parameters = set(vae.discr.parameters())
        vae_parameters = all_parameters - discr_parameters

        self.optim = get_optimizer(list(vae_parameters), lr=lr, wd=wd)
        self.discr_optim = get_optimizer(list(discr_parameters), lr=lr, wd=wd)

        self.amp = amp
        self.scaler = GradScaler('cpu', enabled=amp)
        self.discr_scaler = GradScaler('cpu', enabled=amp)

        self.ds = ImageDataset(folder, image_size=image_size)
        train_size = int((1 - valid_frac) * len(self.ds))
        self.ds, self.valid_ds = random_split(self.ds, [train_size, len(self.ds) - train_size],
                                              generator=torch.Generator().manual_seed(random_split_seed))

        self.dl = cycle(DataLoader(self.ds, batch_size=batch_size, shuffle=True))
        self.save_results_every = save_results_every
        self.apply_grad_penalty_every = apply_grad_penalty_every

    def train_step(self):
        device = next(self.vae.parameters()).device
        steps = int(self.steps.item())
        apply_grad_penalty = not (steps % self.apply_grad_penalty_every)

        self.vae.train()
        logs = {}

        # update vae (generator)

        for _ in range(self.grad_accum_every):
            img = next(self.dl)
            img = img.to(device)

            with autocast('cpu', enabled=self.amp):
                loss = self.vae(img, return_loss=True, apply_grad_penalty=apply_grad_penalty)

                self.scaler.scale(loss / self.grad_accum_every).backward()

            accum_log(logs, {'loss': loss.item() / self.grad_accum_every})

        self.scaler.step(self.optim)
        self.scaler.update()
        self.optim.zero_grad()

        # update discriminator

        if exists(self.vae.discr):
            for _ in range(self.grad_accum_every):
                img = next(self.dl)
                img = img.to(device)

                with autocast('cpu', enabled=self.amp):
                    loss = self.vae(img, return_discr_loss=True)

                    self.discr_scaler.scale(loss / self.grad_accum_every).backward()

                accum_log(logs, {'discr_loss': loss.item() / self.grad_accum_every})

            self.discr_scaler.step(self.discr_optim)
            self.discr_scaler.update()
            self.discr_optim.zero_grad()

        # update exponential moving averaged generator

        self.ema_vae.update()

        # sample results every so often

        if not (steps % self.save_results_every):
            self.vae.eval()
            imgs = next(self.dl).to(device)
            recons = self.vae(imgs)
            logs['reconstructions'] = torch.stack((imgs, recons)).detach().clamp(0., 1.)

        self.steps += 1
        return logs

    def train(self, log_fn=noop):
        while self.steps < self.num_train_steps:
            logs = self.train_step()
            log_fn(logs)


if __name__ == '__main__':
    torch.manual_seed(0)
    vae = VitVQGanVAE(dim=8, image_size=8)
    trainer = VQGanVAETrainer(vae, folder='/path/to/images', num_train_steps=4, batch_size=2,
                              grad_accum_every=2, save_results_every=3, apply_grad_penalty_every=2)
    trainer.train()
