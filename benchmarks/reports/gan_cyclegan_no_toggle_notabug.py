# source: https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/issues/1211
# pattern: CycleGANModel.optimize_parameters with the two set_requires_grad([netD_A, netD_B], ...) lines deleted, as the user asked: backward_G now writes gradients into both discriminators, but optimizer_D.zero_grad() runs before backward_D_A/backward_D_B, so optimizer_D.step applies only the D losses; answered in the thread: it only costs efficiency
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: optimizer #0 (optimizer_G) applies only loss_G (L128); optimizer #1 (optimizer_D, both Ds) applies only the two D losses of backward_D_basic (L100); oracle.py: AGREE (clean)
import itertools
import random
from argparse import Namespace

import torch
import torch.nn as nn


class GANLoss(nn.Module):
    def __init__(self, gan_mode):
        super().__init__()
        self.register_buffer('real_label', torch.tensor(1.0))
        self.register_buffer('fake_label', torch.tensor(0.0))
        self.loss = nn.MSELoss() if gan_mode == 'lsgan' else nn.BCEWithLogitsLoss()

    def __call__(self, prediction, target_is_real):
        target = (self.real_label if target_is_real else self.fake_label).expand_as(prediction)
        return self.loss(prediction, target)


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
        if random.uniform(0, 1) > 0.5:
            random_id = random.randint(0, self.pool_size - 1)
            tmp = self.images[random_id].clone()
            self.images[random_id] = images.detach()
            return tmp
        return images


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


class CycleGANModel(BaseModel):
    def __init__(self, opt):
        BaseModel.__init__(self, opt)
        self.netG_A = define_G(opt.input_nc, opt.output_nc, opt.ngf)
        self.netG_B = define_G(opt.output_nc, opt.input_nc, opt.ngf)
        if self.isTrain:
            self.netD_A = define_D(opt.output_nc, opt.ndf)
            self.netD_B = define_D(opt.input_nc, opt.ndf)
            self.fake_A_pool = ImagePool(opt.pool_size)
            self.fake_B_pool = ImagePool(opt.pool_size)
            self.criterionGAN = GANLoss(opt.gan_mode)
            self.criterionCycle = torch.nn.L1Loss()
            self.criterionIdt = torch.nn.L1Loss()
            self.optimizer_G = torch.optim.Adam(itertools.chain(self.netG_A.parameters(), self.netG_B.parameters()),
                                                lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizer_D = torch.optim.Adam(itertools.chain(self.netD_A.parameters(), self.netD_B.parameters()),
                                                lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizers.append(self.optimizer_G)
            self.optimizers.append(self.optimizer_D)

    def set_input(self, input):
        AtoB = self.opt.direction == 'AtoB'
        self.real_A = input['A' if AtoB else 'B']
        self.real_B = input['B' if AtoB else 'A']

    def forward(self):
        self.fake_B = self.netG_A(self.real_A)
        self.rec_A = self.netG_B(self.fake_B)
        self.fake_A = self.netG_B(self.real_B)
        self.rec_B = self.netG_A(self.fake_A)

    def backward_D_basic(self, netD, real, fake):
        pred_real = netD(real)
        loss_D_real = self.criterionGAN(pred_real, True)
        pred_fake = netD(fake.detach())
        loss_D_fake = self.criterionGAN(pred_fake, False)
        loss_D = (loss_D_real + loss_D_fake) * 0.5
        loss_D.backward()
        return loss_D

    def backward_D_A(self):
        fake_B = self.fake_B_pool.query(self.fake_B)
        self.loss_D_A = self.backward_D_basic(self.netD_A, self.real_B, fake_B)

    def backward_D_B(self):
        fake_A = self.fake_A_pool.query(self.fake_A)
        self.loss_D_B = self.backward_D_basic(self.netD_B, self.real_A, fake_A)

    def backward_G(self):
        lambda_idt = self.opt.lambda_identity
        lambda_A = self.opt.lambda_A
        lambda_B = self.opt.lambda_B
        if lambda_idt > 0:
            self.idt_A = self.netG_A(self.real_B)
            self.loss_idt_A = self.criterionIdt(self.idt_A, self.real_B) * lambda_B * lambda_idt
            self.idt_B = self.netG_B(self.real_A)
            self.loss_idt_B = self.criterionIdt(self.idt_B, self.real_A) * lambda_A * lambda_idt
        else:
            self.loss_idt_A = 0
            self.loss_idt_B = 0
        self.loss_G_A = self.criterionGAN(self.netD_A(self.fake_B), True)
        self.loss_G_B = self.criterionGAN(self.netD_B(self.fake_A), True)
        self.loss_cycle_A = self.criterionCycle(self.rec_A, self.real_A) * lambda_A
        self.loss_cycle_B = self.criterionCycle(self.rec_B, self.real_B) * lambda_B
        self.loss_G = self.loss_G_A + self.loss_G_B + self.loss_cycle_A + self.loss_cycle_B + self.loss_idt_A + self.loss_idt_B
        self.loss_G.backward()

    def optimize_parameters(self):
        # forward
        self.forward()
        # G_A and G_B
        self.optimizer_G.zero_grad()
        self.backward_G()
        self.optimizer_G.step()
        # D_A and D_B
        self.optimizer_D.zero_grad()
        self.backward_D_A()
        self.backward_D_B()
        self.optimizer_D.step()


def create_model(opt):
    return CycleGANModel(opt)


if __name__ == '__main__':
    random.seed(0)
    torch.manual_seed(0)
    opt = Namespace(isTrain=True, input_nc=3, output_nc=3, ngf=4, ndf=4, gan_mode='lsgan', lr=2e-4, beta1=0.5,
                    pool_size=2, lambda_identity=0.5, lambda_A=10.0, lambda_B=10.0, direction='AtoB',
                    epoch_count=1, niter=2, niter_decay=1)
    dataset = [{'A': torch.randn(1, 3, 8, 8), 'B': torch.randn(1, 3, 8, 8)} for _ in range(4)]
    model = create_model(opt)
    for epoch in range(opt.epoch_count, opt.niter + opt.niter_decay + 1):
        for i, data in enumerate(dataset):
            model.set_input(data)
            model.optimize_parameters()
