# source: https://github.com/Lornatang/SRGAN-PyTorch/commit/b7743b74bdc809d2e15fc0ffc9dfaf7e75a46053
# pattern: SRGAN trainer: the generator's PSNR warm-up phase, train_psnr(), runs scaler.scale(loss).backward() and scaler.step(optimizer) every batch with the optimizer Trainer.__init__ built, and neither it nor Trainer.run clears the generator's gradients (the fix adds model.zero_grad()); train_gan clears both nets
# case: bug
# expect: ZG001@62-64
# spread: multi
# label: oracle.py: AGREE (STALE at every psnr_optimizer step after the first: train_psnr never clears what its backward at L62 left)
import math
from argparse import Namespace

import torch
import torch.nn as nn
import torch.utils.data
from torch import amp


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.PReLU(), nn.Conv2d(4, 3 * 4, 3, padding=1))
        self.upsample = nn.PixelShuffle(2)

    def forward(self, x):
        return torch.tanh(self.upsample(self.body(x)))


def discriminator():
    return nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.LeakyReLU(0.2, True),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 1), nn.Sigmoid())


class VGGLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        for p in self.features.parameters():
            p.requires_grad = False

    def forward(self, sr, hr):
        return nn.functional.mse_loss(self.features(sr), self.features(hr))


def train_psnr(epoch: int,
               total_epoch: int,
               total_iters: int,
               dataloader: torch.utils.data.DataLoader,
               model: nn.Module,
               pixel_criterion: nn.MSELoss,
               optimizer: torch.optim.Adam,
               scaler: amp.GradScaler,
               device: torch.device):
    model.train()
    for i, (input, target) in enumerate(dataloader):
        lr = input.to(device)
        hr = target.to(device)

        # Runs the forward pass with autocasting.
        with amp.autocast("cpu", enabled=False):
            sr = model(lr)
            loss = pixel_criterion(sr, hr)

        # Scales loss.  Calls backward() on scaled loss to create scaled gradients.
        scaler.scale(loss).backward()
        # scaler.step() first unscales the gradients of the optimizer's assigned params.
        scaler.step(optimizer)
        # Updates the scale for next iteration.
        scaler.update()

        iters = i + epoch * len(dataloader) + 1
        if iters == int(total_iters):  # If the iteration is reached, exit.
            break


def train_gan(epoch: int,
              total_epoch: int,
              total_iters: int,
              dataloader: torch.utils.data.DataLoader,
              discriminator: nn.Module,
              generator: nn.Module,
              pixel_criterion: nn.MSELoss,
              perceptual_criterion: VGGLoss,
              adversarial_criterion: nn.BCELoss,
              discriminator_optimizer: torch.optim.Adam,
              generator_optimizer: torch.optim.Adam,
              discriminator_scheduler: torch.optim.lr_scheduler.StepLR,
              generator_scheduler: torch.optim.lr_scheduler.StepLR,
              device: torch.device):
    generator.train()
    discriminator.train()
    for i, (input, target) in enumerate(dataloader):
        lr = input.to(device)
        hr = target.to(device)
        batch_size = lr.size(0)
        real_label = torch.full((batch_size, 1), 1, dtype=lr.dtype, device=device)
        fake_label = torch.full((batch_size, 1), 0, dtype=lr.dtype, device=device)

        # (1) Update D network
        discriminator.zero_grad()
        sr = generator(lr)
        output = discriminator(hr)
        errD_real = adversarial_criterion(output, real_label)
        output = discriminator(sr.detach())
        errD_fake = adversarial_criterion(output, fake_label)
        errD = errD_real + errD_fake
        errD.backward()
        discriminator_optimizer.step()

        # (2) Update G network
        generator.zero_grad()
        output = discriminator(sr)
        pixel_loss = pixel_criterion(sr, hr)
        perceptual_loss = perceptual_criterion(sr, hr)
        adversarial_loss = adversarial_criterion(output, real_label)
        errG = pixel_loss + 0.006 * perceptual_loss + 0.001 * adversarial_loss
        errG.backward()
        generator_optimizer.step()

        iters = i + epoch * len(dataloader) + 1
        if iters == int(total_iters):
            break

    discriminator_scheduler.step()
    generator_scheduler.step()


def test_psnr(model, pixel_criterion, dataloader, device):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for input, target in dataloader:
            mse = pixel_criterion(model(input.to(device)), target.to(device))
            total += 10 * math.log10(1.0 / max(mse.item(), 1e-10))
    return total / len(dataloader)


class Trainer(object):
    def __init__(self, args):
        self.args = args
        torch.manual_seed(args.manualSeed)
        train_dataset = torch.utils.data.TensorDataset(torch.rand(8, 3, 4, 4), torch.rand(8, 3, 8, 8))
        self.train_dataloader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size)
        self.test_dataloader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size)
        self.device = torch.device("cpu")
        self.generator = Generator().to(self.device)
        self.discriminator = discriminator().to(self.device)

        self.start_psnr_epoch = math.floor(args.start_psnr_iter / len(self.train_dataloader))
        self.psnr_epochs = math.ceil(args.psnr_iters / len(self.train_dataloader))
        self.psnr_optimizer = torch.optim.Adam(self.generator.parameters(), lr=args.lr, betas=(0.9, 0.999))
        self.scaler = amp.GradScaler("cpu", enabled=False)

        self.start_epoch = math.floor(args.start_iter / len(self.train_dataloader))
        self.epochs = math.ceil(args.iters / len(self.train_dataloader))
        self.discriminator_optimizer = torch.optim.Adam(self.discriminator.parameters(), lr=args.lr, betas=(0.9, 0.999))
        self.generator_optimizer = torch.optim.Adam(self.generator.parameters(), lr=args.lr, betas=(0.9, 0.999))
        self.discriminator_scheduler = torch.optim.lr_scheduler.StepLR(self.discriminator_optimizer,
                                                                       step_size=max(1, self.epochs // 2), gamma=0.1)
        self.generator_scheduler = torch.optim.lr_scheduler.StepLR(self.generator_optimizer,
                                                                   step_size=max(1, self.epochs // 2), gamma=0.1)
        self.pixel_criterion = nn.MSELoss().to(self.device)
        self.adversarial_criterion = nn.BCELoss().to(self.device)
        self.perceptual_criterion = VGGLoss().to(self.device)

    def run(self):
        args = self.args
        best_psnr = 0.
        if args.start_psnr_iter < args.psnr_iters:
            for psnr_epoch in range(self.start_psnr_epoch, self.psnr_epochs):
                train_psnr(epoch=psnr_epoch,
                           total_epoch=self.psnr_epochs,
                           total_iters=args.psnr_iters,
                           dataloader=self.train_dataloader,
                           model=self.generator,
                           pixel_criterion=self.pixel_criterion,
                           optimizer=self.psnr_optimizer,
                           scaler=self.scaler,
                           device=self.device)
                psnr = test_psnr(model=self.generator, pixel_criterion=self.pixel_criterion,
                                 dataloader=self.test_dataloader, device=self.device)
                best_psnr = max(psnr, best_psnr)

        for epoch in range(self.start_epoch, self.epochs):
            train_gan(epoch=epoch,
                      total_epoch=self.epochs,
                      total_iters=args.iters,
                      dataloader=self.train_dataloader,
                      discriminator=self.discriminator,
                      generator=self.generator,
                      pixel_criterion=self.pixel_criterion,
                      perceptual_criterion=self.perceptual_criterion,
                      adversarial_criterion=self.adversarial_criterion,
                      discriminator_optimizer=self.discriminator_optimizer,
                      generator_optimizer=self.generator_optimizer,
                      discriminator_scheduler=self.discriminator_scheduler,
                      generator_scheduler=self.generator_scheduler,
                      device=self.device)


if __name__ == "__main__":
    args = Namespace(manualSeed=0, batch_size=2, lr=1e-4, start_psnr_iter=0, psnr_iters=12, start_iter=0, iters=8)
    Trainer(args).run()
