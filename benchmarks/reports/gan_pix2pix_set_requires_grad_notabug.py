# source: https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/issues/651
# pattern: pix2pix model: BaseModel.set_requires_grad(self.netD, False) freezes D around backward_G and unfreezes it for backward_D, which detaches fake_B; the user feared G could not learn through a frozen D; not a bug (maintainer: a speed-up, G still gets its gradients)
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: optimizer #0 (optimizer_G) applies only backward_G's loss (L97) and #1 (optimizer_D) only backward_D's (L86); oracle.py: AGREE (clean)
from argparse import Namespace

import torch
import torch.nn as nn


class GANLoss(nn.Module):
    def __init__(self, gan_mode):
        super().__init__()
        self.register_buffer('real_label', torch.tensor(1.0))
        self.register_buffer('fake_label', torch.tensor(0.0))
        self.loss = nn.MSELoss() if gan_mode == 'lsgan' else nn.BCEWithLogitsLoss()

    def get_target_tensor(self, prediction, target_is_real):
        target_tensor = self.real_label if target_is_real else self.fake_label
        return target_tensor.expand_as(prediction)

    def __call__(self, prediction, target_is_real):
        return self.loss(prediction, self.get_target_tensor(prediction, target_is_real))


def define_G(input_nc, output_nc, ngf):
    return nn.Sequential(nn.Conv2d(input_nc, ngf, 3, padding=1), nn.ReLU(True),
                         nn.Conv2d(ngf, output_nc, 3, padding=1), nn.Tanh())


def define_D(input_nc, ndf):
    return nn.Sequential(nn.Conv2d(input_nc, ndf, 3, stride=2, padding=1), nn.LeakyReLU(0.2, True),
                         nn.Conv2d(ndf, 1, 3, padding=1))


class BaseModel:
    def __init__(self, opt):
        self.opt = opt
        self.isTrain = opt.isTrain
        self.optimizers = []

    def set_requires_grad(self, nets, requires_grad=False):
        """Set requires_grad=False for all the networks to avoid unnecessary computations"""
        if not isinstance(nets, list):
            nets = [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad


class Pix2PixModel(BaseModel):
    def __init__(self, opt):
        BaseModel.__init__(self, opt)
        self.netG = define_G(opt.input_nc, opt.output_nc, opt.ngf)
        if self.isTrain:
            self.netD = define_D(opt.input_nc + opt.output_nc, opt.ndf)
            self.criterionGAN = GANLoss(opt.gan_mode)
            self.criterionL1 = torch.nn.L1Loss()
            self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizers.append(self.optimizer_G)
            self.optimizers.append(self.optimizer_D)

    def set_input(self, input):
        AtoB = self.opt.direction == 'AtoB'
        self.real_A = input['A' if AtoB else 'B']
        self.real_B = input['B' if AtoB else 'A']

    def forward(self):
        self.fake_B = self.netG(self.real_A)  # G(A)

    def backward_D(self):
        # Fake; stop backprop to the generator by detaching fake_B
        fake_AB = torch.cat((self.real_A, self.fake_B), 1)
        pred_fake = self.netD(fake_AB.detach())
        self.loss_D_fake = self.criterionGAN(pred_fake, False)
        # Real
        real_AB = torch.cat((self.real_A, self.real_B), 1)
        pred_real = self.netD(real_AB)
        self.loss_D_real = self.criterionGAN(pred_real, True)
        # combine loss and calculate gradients
        self.loss_D = (self.loss_D_fake + self.loss_D_real) * 0.5
        self.loss_D.backward()

    def backward_G(self):
        # First, G(A) should fake the discriminator
        fake_AB = torch.cat((self.real_A, self.fake_B), 1)
        pred_fake = self.netD(fake_AB)
        self.loss_G_GAN = self.criterionGAN(pred_fake, True)
        # Second, G(A) = B
        self.loss_G_L1 = self.criterionL1(self.fake_B, self.real_B) * self.opt.lambda_L1
        # combine loss and calculate gradients
        self.loss_G = self.loss_G_GAN + self.loss_G_L1
        self.loss_G.backward()

    def optimize_parameters(self):
        self.forward()                   # compute fake images: G(A)
        # update D
        self.set_requires_grad(self.netD, True)  # enable backprop for D
        self.optimizer_D.zero_grad()     # set D's gradients to zero
        self.backward_D()                # calculate gradients for D
        self.optimizer_D.step()          # update D's weights
        # update G
        self.set_requires_grad(self.netD, False)  # D requires no gradients when optimizing G
        self.optimizer_G.zero_grad()        # set G's gradients to zero
        self.backward_G()                   # calculate graidents for G
        self.optimizer_G.step()             # udpate G's weights


def create_model(opt):
    return Pix2PixModel(opt)


if __name__ == '__main__':
    torch.manual_seed(0)
    opt = Namespace(isTrain=True, input_nc=3, output_nc=3, ngf=4, ndf=4, gan_mode='vanilla', lr=2e-4,
                    beta1=0.5, lambda_L1=100.0, direction='AtoB', epoch_count=1, niter=2, niter_decay=1)
    dataset = [{'A': torch.randn(1, 3, 8, 8), 'B': torch.randn(1, 3, 8, 8)} for _ in range(4)]
    model = create_model(opt)
    for epoch in range(opt.epoch_count, opt.niter + opt.niter_decay + 1):
        for i, data in enumerate(dataset):
            model.set_input(data)
            model.optimize_parameters()
