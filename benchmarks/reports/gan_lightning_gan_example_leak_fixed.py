# source: https://github.com/Lightning-AI/pytorch-lightning/pull/666
# pattern: Lightning's GAN example with the user-side fix of PR #666 (0.5-era trainer loop as a stand-in in the script): g_loss still leaves gradients in self.discriminator, but training_step clears the discriminator's gradients before returning d_loss, so the trainer's backward and opt_d.step see only d_loss
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: each step of optimizer #1 (opt_d) applies only the backward run for optimizer_idx 1; oracle.py: AGREE (clean)
from argparse import Namespace
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- tiny stand-in of the 0.5-era LightningModule hooks and Trainer loop ----
class LightningModule(nn.Module):
    def backward(self, use_amp, loss, optimizer, optimizer_idx):
        loss.backward()

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_idx, second_order_closure=None):
        optimizer.step()
        optimizer.zero_grad()

    def on_epoch_end(self):
        pass


class Trainer:
    def __init__(self, max_epochs=3, accumulate_grad_batches=1):
        self.max_epochs = max_epochs
        self.accumulate_grad_batches = accumulate_grad_batches

    def fit(self, model):
        self.model = model
        self.optimizers, self.lr_schedulers = model.configure_optimizers()
        loader = model.train_dataloader()
        for self.current_epoch in range(self.max_epochs):
            for batch_idx, batch in enumerate(loader):
                self.run_training_batch(batch, batch_idx)
            model.on_epoch_end()

    def run_training_batch(self, batch, batch_idx):
        model = self.model
        # call training_step once per optimizer
        for opt_idx, optimizer in enumerate(self.optimizers):
            output = model.training_step(batch, batch_idx, opt_idx)
            closure_loss = output['loss']
            closure_loss = closure_loss / self.accumulate_grad_batches
            model.backward(False, closure_loss, optimizer, opt_idx)

            if (batch_idx + 1) % self.accumulate_grad_batches == 0:
                model.optimizer_step(self.current_epoch, batch_idx, optimizer, opt_idx)
# ---- end of stand-in ----


class Generator(nn.Module):
    def __init__(self, latent_dim, img_shape):
        super().__init__()
        self.img_shape = img_shape

        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(
            *block(latent_dim, 16, normalize=False),
            *block(16, 16),
            nn.Linear(16, img_shape[0] * img_shape[1] * img_shape[2]),
            nn.Tanh(),
        )

    def forward(self, z):
        img = self.model(z)
        return img.view(img.size(0), *self.img_shape)


class Discriminator(nn.Module):
    def __init__(self, img_shape):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(img_shape[0] * img_shape[1] * img_shape[2], 16),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(16, 1),
            nn.Sigmoid(),
        )

    def forward(self, img):
        return self.model(img.view(img.size(0), -1))


class GAN(LightningModule):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        img_shape = (1, 4, 4)
        self.generator = Generator(latent_dim=hparams.latent_dim, img_shape=img_shape)
        self.discriminator = Discriminator(img_shape=img_shape)
        self.generated_imgs = None
        self.last_imgs = None

    def forward(self, z):
        return self.generator(z)

    def adversarial_loss(self, y_hat, y):
        return F.binary_cross_entropy(y_hat, y)

    def training_step(self, batch, batch_idx, optimizer_idx):
        imgs, _ = batch
        self.last_imgs = imgs

        # train generator
        if optimizer_idx == 0:
            z = torch.randn(imgs.shape[0], self.hparams.latent_dim).type_as(imgs)
            self.generated_imgs = self(z)
            valid = torch.ones(imgs.size(0), 1).type_as(imgs)
            g_loss = self.adversarial_loss(self.discriminator(self.generated_imgs), valid)
            tqdm_dict = {'g_loss': g_loss}
            return OrderedDict({'loss': g_loss, 'progress_bar': tqdm_dict, 'log': tqdm_dict})

        # train discriminator
        if optimizer_idx == 1:
            valid = torch.ones(imgs.size(0), 1).type_as(imgs)
            real_loss = self.adversarial_loss(self.discriminator(imgs), valid)
            fake = torch.zeros(imgs.size(0), 1).type_as(imgs)
            fake_loss = self.adversarial_loss(self.discriminator(self.generated_imgs.detach()), fake)
            d_loss = (real_loss + fake_loss) / 2

            # clear the gradients the generator's step left in the discriminator
            self.discriminator.zero_grad()
            tqdm_dict = {'d_loss': d_loss}
            return OrderedDict({'loss': d_loss, 'progress_bar': tqdm_dict, 'log': tqdm_dict})

    def configure_optimizers(self):
        lr, b1, b2 = self.hparams.lr, self.hparams.b1, self.hparams.b2
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
        return [opt_g, opt_d], []

    def train_dataloader(self):
        return [(torch.rand(4, 1, 4, 4) * 2 - 1, torch.zeros(4)) for _ in range(4)]

    def on_epoch_end(self):
        z = torch.randn(2, self.hparams.latent_dim).type_as(self.last_imgs)
        with torch.no_grad():
            self(z)


def main(hparams):
    model = GAN(hparams)
    trainer = Trainer(max_epochs=3)
    trainer.fit(model)


if __name__ == '__main__':
    torch.manual_seed(0)
    main(Namespace(batch_size=4, lr=0.0002, b1=0.5, b2=0.999, latent_dim=8))
