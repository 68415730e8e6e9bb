# source: https://github.com/yifanjiang19/Pedestrian-Synthesis-GAN/issues/32
# pattern: pix2pix model with an image D and a person D: backward_D_person feeds the undetached person crop of fake_B, so D_person's loss writes into netG, and backward_G reaches both Ds; not a bug (maintainer): optimize_parameters clears optimizer_G right before backward_G and each D optimizer right before its own backward
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: optimizer #0 (optimizer_G) applies only backward_G's loss (L109); #1 (D_image) and #2 (D_person) apply only their own losses (L91, L99); oracle.py: AGREE (clean)
import random
from argparse import Namespace

import torch
import torch.nn as nn


class GANLoss(nn.Module):
    def __init__(self, use_lsgan=True):
        super().__init__()
        self.loss = nn.MSELoss() if use_lsgan else nn.BCEWithLogitsLoss()

    def __call__(self, input, target_is_real):
        target = torch.full_like(input, 1.0 if target_is_real else 0.0)
        return self.loss(input, target)


class ImagePool:
    def __init__(self, pool_size):
        self.pool_size = pool_size
        self.images = []

    def query(self, images):
        if self.pool_size == 0:
            return images
        if len(self.images) < self.pool_size:
            self.images.append(images.detach())
            return images
        if random.random() > 0.5:
            idx = random.randrange(self.pool_size)
            old = self.images[idx]
            self.images[idx] = images.detach()
            return old
        return images


def define_G(input_nc, output_nc):
    return nn.Sequential(nn.Conv2d(input_nc, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, output_nc, 3, padding=1), nn.Tanh())


def define_image_D(input_nc):
    return nn.Sequential(nn.Conv2d(input_nc, 4, 3, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(4, 1, 3, padding=1))


def define_person_D(input_nc):
    return nn.Sequential(nn.Conv2d(input_nc, 4, 3, padding=1), nn.LeakyReLU(0.2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 1))


class Pix2PixModel:
    def initialize(self, opt):
        self.opt = opt
        self.netG = define_G(opt.input_nc, opt.output_nc)
        self.netD_image = define_image_D(opt.input_nc + opt.output_nc)
        self.netD_person = define_person_D(opt.input_nc)
        self.fake_AB_pool = ImagePool(opt.pool_size)
        self.criterionGAN_image = GANLoss(use_lsgan=not opt.no_lsgan)
        self.criterionGAN_person = GANLoss(use_lsgan=opt.no_lsgan)
        self.criterionL1 = nn.L1Loss()
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
        self.optimizer_D_image = torch.optim.Adam(self.netD_image.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
        self.optimizer_D_person = torch.optim.Adam(self.netD_person.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

    def set_input(self, input):
        self.input_A = input['A']
        self.input_B = input['B']
        self.bbox = input['bbox']

    def forward(self):
        self.real_A = self.input_A
        self.fake_B = self.netG(self.real_A)
        self.real_B = self.input_B
        y, x, w, h = self.bbox
        self.person_crop_real = self.real_B[:, :, y:h, x:w]
        self.person_crop_fake = self.fake_B[:, :, y:h, x:w]

    def backward_D_image(self):
        # stop backprop to the generator by detaching fake_B
        fake_AB = self.fake_AB_pool.query(torch.cat((self.real_A, self.fake_B), 1))
        self.pred_fake = self.netD_image(fake_AB.detach())
        self.loss_D_image_fake = self.criterionGAN_image(self.pred_fake, False)
        real_AB = torch.cat((self.real_A, self.real_B), 1)
        self.pred_real = self.netD_image(real_AB)
        self.loss_D_image_real = self.criterionGAN_image(self.pred_real, True)
        self.loss_D_image = (self.loss_D_image_fake + self.loss_D_image_real) * 0.5
        self.loss_D_image.backward()

    def backward_D_person(self):
        self.person_fake = self.netD_person(self.person_crop_fake)
        self.loss_D_person_fake = self.criterionGAN_person(self.person_fake, False)
        self.person_real = self.netD_person(self.person_crop_real)
        self.loss_D_person_real = self.criterionGAN_person(self.person_real, True)
        self.loss_D_person = (self.loss_D_person_fake + self.loss_D_person_real) * 0.5
        self.loss_D_person.backward()

    def backward_G(self):
        fake_AB = torch.cat((self.real_A, self.fake_B), 1)
        pred_fake_image = self.netD_image(fake_AB)
        self.loss_G_GAN_image = self.criterionGAN_image(pred_fake_image, True)
        self.loss_G_L1 = self.criterionL1(self.fake_B, self.real_B) * self.opt.lambda_A
        pred_fake_person = self.netD_person(self.person_crop_fake)
        self.loss_G_GAN_person = self.criterionGAN_person(pred_fake_person, True)
        self.loss_G = self.loss_G_GAN_image + self.loss_G_L1 + self.loss_G_GAN_person
        self.loss_G.backward()

    def optimize_parameters(self, only_d):
        self.forward()
        self.optimizer_D_image.zero_grad()
        self.backward_D_image()
        self.optimizer_D_image.step()

        self.forward()
        self.optimizer_D_person.zero_grad()
        self.backward_D_person()
        self.optimizer_D_person.step()

        if only_d == False:
            self.forward()
            self.optimizer_G.zero_grad()
            self.backward_G()
            self.optimizer_G.step()


def create_model(opt):
    model = Pix2PixModel()
    model.initialize(opt)
    return model


def load_data():
    for _ in range(4):
        yield {'A': torch.randn(1, 3, 8, 8), 'B': torch.randn(1, 3, 8, 8), 'bbox': (2, 1, 6, 5)}


if __name__ == '__main__':
    random.seed(0)
    torch.manual_seed(0)
    opt = Namespace(input_nc=3, output_nc=3, pool_size=2, no_lsgan=False, lr=2e-4, beta1=0.5,
                    lambda_A=100.0, niter=2, niter_decay=1)
    model = create_model(opt)
    only_d = False
    for epoch in range(1, opt.niter + opt.niter_decay + 1):
        for i, data in enumerate(load_data()):
            model.set_input(data)
            model.optimize_parameters(only_d)
