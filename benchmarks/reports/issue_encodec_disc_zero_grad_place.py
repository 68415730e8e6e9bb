# source: https://github.com/ZhikangNiu/encodec-pytorch/commit/202ca08a2de98eb46e709340d58294d82832d092
# pattern: EnCodec train_one_step(): optimizer_disc.zero_grad() sits at the top of the batch, before the generator loss; total_loss() runs disc_model on the real and the generated audio (feature matching + adversarial), so the generator's backward fills the discriminator's .grad and optimizer_disc.step() later applies it together with disc_loss (fix: clear the discriminator right before its own loss)
# case: bug
# expect: ZG006@120-127
# spread: multi
# label: contributions.py: optimizer #1 (optimizer_disc, Adam over disc_model) applies backward@L108 (the generator loss) besides its own backward@L126
import logging
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.amp import GradScaler, autocast

logger = logging.getLogger()


class EncodecModel(nn.Module):
    # stand-in: conv encoder, a residual VQ with a commitment loss, conv decoder
    def __init__(self, channels=1, dim=8, bins=16):
        super().__init__()
        self.encoder = nn.Conv1d(channels, dim, 4, stride=2, padding=1)
        self.codebook = nn.Parameter(torch.randn(bins, dim))
        self.decoder = nn.ConvTranspose1d(dim, channels, 4, stride=2, padding=1)

    def quantize(self, e):
        flat = e.transpose(1, 2)
        idx = torch.cdist(flat, self.codebook[None].expand(flat.shape[0], -1, -1)).argmin(-1)
        q = self.codebook[idx]
        commit = F.mse_loss(flat, q.detach()) + F.mse_loss(q, flat.detach())
        q = flat + (q - flat).detach()
        return q.transpose(1, 2), commit, idx

    def forward(self, x):
        e = self.encoder(x)
        q, loss_w, codes = self.quantize(e)
        return self.decoder(q), loss_w, codes


class MultiScaleSTFTDiscriminator(nn.Module):
    # stand-in: two scales, each a small conv stack returning logits and feature maps
    def __init__(self, filters=4, n_scales=2):
        super().__init__()
        self.discriminators = nn.ModuleList([
            nn.ModuleList([nn.Conv1d(1, filters, 3, padding=1), nn.Conv1d(filters, 1, 3, padding=1)])
            for _ in range(n_scales)])

    def forward(self, x):
        logits, fmaps = [], []
        for i, disc in enumerate(self.discriminators):
            h = F.avg_pool1d(x, 2 ** i) if i else x
            fmap = []
            for layer in disc:
                h = layer(h)
                fmap.append(h)
                h = F.leaky_relu(h, 0.2)
            logits.append(fmap[-1])
            fmaps.append(fmap[:-1])
        return logits, fmaps


def total_loss(fmap_real, logits_fake, fmap_fake, input_wav, output_wav):
    l1 = F.l1_loss(output_wav, input_wav)
    l_g = sum(torch.mean(F.relu(1 - lf)) for lf in logits_fake) / len(logits_fake)
    l_feat = 0
    for fr, ff in zip(fmap_real, fmap_fake):
        for r, f in zip(fr, ff):
            l_feat = l_feat + F.l1_loss(r, f) / (torch.mean(torch.abs(r)) + 1e-6)
    return 3 * l_g + 3 * l_feat / len(fmap_real) + l1


def disc_loss(logits_real, logits_fake):
    lossd = 0.0
    for lr_, lf in zip(logits_real, logits_fake):
        lossd = lossd + torch.mean(F.relu(1 - lr_)) + torch.mean(F.relu(1 + lf))
    return lossd / len(logits_real)


# Define train one step function
def train_one_step(epoch, optimizer, optimizer_disc, model, disc_model, trainloader, config, scheduler, disc_scheduler, scaler=None, scaler_disc=None):
    model.train()
    disc_model.train()
    data_length = len(trainloader)
    accumulated_loss = 0.0
    accumulated_loss_disc = 0.0

    for idx, input_wav in enumerate(trainloader):
        input_wav = input_wav.contiguous()
        optimizer.zero_grad()
        optimizer_disc.zero_grad()
        if config.common.amp:
            with autocast('cpu'):
                output, loss_w, _ = model(input_wav)
                logits_real, fmap_real = disc_model(input_wav)
                logits_fake, fmap_fake = disc_model(output)
                loss_g = total_loss(fmap_real, logits_fake, fmap_fake, input_wav, output)
                loss = loss_g + loss_w
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            output, loss_w, _ = model(input_wav)
            logits_real, fmap_real = disc_model(input_wav)
            logits_fake, fmap_fake = disc_model(output)
            loss_g = total_loss(fmap_real, logits_fake, fmap_fake, input_wav, output)
            loss = loss_g + loss_w
            loss.backward()
            optimizer.step()

        accumulated_loss += loss.item()

        if config.model.train_discriminator and epoch >= config.lr_scheduler.warmup_epoch:
            if config.common.amp:
                with autocast('cpu'):
                    logits_real, _ = disc_model(input_wav)
                    logits_fake, _ = disc_model(output.detach())  # detach to avoid backpropagation to model
                    loss_disc = disc_loss(logits_real, logits_fake)
                scaler_disc.scale(loss_disc).backward()
                scaler_disc.step(optimizer_disc)
                scaler_disc.update()
            else:
                logits_real, _ = disc_model(input_wav)
                logits_fake, _ = disc_model(output.detach())  # detach to avoid backpropagation to model
                loss_disc = disc_loss(logits_real, logits_fake)
                loss_disc.backward()
                optimizer_disc.step()
            accumulated_loss_disc += loss_disc.item()
        scheduler.step()
        disc_scheduler.step()

        if idx % config.common.log_interval == 0 or idx == data_length - 1:
            logger.info(f"Epoch {epoch} {idx + 1}/{data_length}\tAvg Loss: {accumulated_loss / (idx + 1):.4f}")


def train(config):
    torch.manual_seed(config.common.seed)
    model = EncodecModel()
    disc_model = MultiScaleSTFTDiscriminator()
    trainloader = [torch.randn(2, 1, 16) for _ in range(4)]
    optimizer = optim.Adam(model.parameters(), lr=config.optimization.lr, betas=(0.5, 0.9))
    optimizer_disc = optim.Adam(disc_model.parameters(), lr=config.optimization.disc_lr, betas=(0.5, 0.9))
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.9)
    disc_scheduler = optim.lr_scheduler.StepLR(optimizer_disc, step_size=10, gamma=0.9)
    scaler = GradScaler('cpu') if config.common.amp else None
    scaler_disc = GradScaler('cpu') if config.common.amp else None
    for epoch in range(1, config.common.max_epoch + 1):
        train_one_step(epoch, optimizer, optimizer_disc, model, disc_model, trainloader, config,
                       scheduler, disc_scheduler, scaler, scaler_disc)


if __name__ == '__main__':
    config = SimpleNamespace(
        common=SimpleNamespace(amp=False, seed=0, max_epoch=2, log_interval=2),
        model=SimpleNamespace(train_discriminator=True),
        lr_scheduler=SimpleNamespace(warmup_epoch=0),
        optimization=SimpleNamespace(lr=3e-4, disc_lr=3e-4),
    )
    train(config)
