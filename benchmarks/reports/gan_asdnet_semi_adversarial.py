# source: https://github.com/ginobilinie/asdnet/issues/2
# pattern: semi-supervised segmentation GAN, one accumulation window of iter_size batches per update: netD's losses are backpropagated through the undetached netG output and the generator's adversarial loss through netD, both nets are cleared only at the top of the window, so optimizerG.step applies D's loss_fake and optimizerD.step applies G's lossG_D (maintainer: "theoretically you're right")
# case: bug
# expect: ZG006@138-138 ZG006@139-139
# spread: single
# label: contributions.py: optimizer #0 (optimizerD) applies the generator's adversarial backward calls (L105, L134) and optimizer #1 (optimizerG) applies the discriminator's loss_fake backward (L95)
import random
from argparse import Namespace

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

opt = Namespace(isAdLoss=True, isNetDFullyConv=True, isSoftmaxLoss=True, lr=1e-3, lr_netD=1e-3,
                iter_size=3, start_epoch=1, numofIters=4, lambdaAD=0.5, lambdaSEMI=0.3,
                in_channels=1, out_channels=2, decLREvery=3)


class SegNet(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, out_channels, 3, padding=1)

    def forward(self, x):
        return self.conv2(F.relu(self.conv1(x)))


class DiscriminatorFCN(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, out_channels, 3, padding=1)

    def forward(self, x):
        return self.conv2(F.leaky_relu(self.conv1(x), 0.2))


class DataGenerator:
    def __init__(self, labeled):
        self.labeled = labeled

    def next(self):
        inputs = torch.randn(2, 1, 4, 4)
        if not self.labeled:
            return inputs
        labels = (inputs > 0).long()
        return inputs, labels


def adjust_learning_rate(optimizer, lr):
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def main():
    netG = SegNet(opt.in_channels, opt.out_channels)
    netD = DiscriminatorFCN(opt.out_channels, 2)
    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr_netD)
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr)
    criterion_CEND = nn.CrossEntropyLoss()
    criterion_BCEND = nn.CrossEntropyLoss()
    data_generator = DataGenerator(labeled=True)
    data_generator_unlabeled = DataGenerator(labeled=False)

    for iter in range(opt.start_epoch, opt.numofIters + 1):
        netD.zero_grad()
        netG.zero_grad()
        lossD_total = 0.0
        lossG_total = 0.0
        for m in range(0, opt.iter_size):
            labeled = random.random() < 0.5
            if labeled:  # for labeled cases
                inputs, labels = data_generator.next()
                labels = torch.squeeze(labels, dim=1)

                # prepare the training data for adversarial training
                if opt.isAdLoss:
                    outputG = netG(inputs)
                    outputG = F.softmax(outputG, dim=1)
                    outputR = F.one_hot(labels, 2).permute(0, 3, 1, 2).float()  # output_Real
                    outputD_real = netD(outputR)
                    outputD_fake = netD(outputG)

                    # update D network: maximize log(D(x)) + log(1 - D(G(z)))
                    output_shape = outputD_real.shape
                    if opt.isNetDFullyConv:  # if netD is FCN based
                        real_label = torch.ones(output_shape[0], output_shape[2], output_shape[3]).long()
                        fake_label = torch.zeros(output_shape[0], output_shape[2], output_shape[3]).long()
                        loss_real = criterion_BCEND(outputD_real, real_label)
                        loss_real.backward()
                        # train with fake data
                        loss_fake = criterion_BCEND(outputD_fake, fake_label)
                        loss_fake.backward()
                    lossD_total += (loss_real + loss_fake).item()

                # update G network: minimize the CE loss, maximize the D(G(x))
                if opt.isAdLoss:
                    outputG = netG(inputs)
                    outputG = F.softmax(outputG, dim=1)
                    outputD = netD(outputG)
                    # note, for generator, the label for outputG is real
                    lossG_D = opt.lambdaAD * criterion_BCEND(outputD, real_label)
                    lossG_D.backward(retain_graph=True)

                outputG = netG(inputs)
                if opt.isSoftmaxLoss:
                    lossG_G = criterion_CEND(outputG, labels)
                    lossG_G.backward()  # compute gradients
                    lossG_total += lossG_G.item()
            else:  # for unlabeled cases: L_semi loss and L_ADV loss
                inputs_unlabeled = data_generator_unlabeled.next()
                if opt.isAdLoss:
                    outputG = netG(inputs_unlabeled)
                    outputG_nosmax = outputG
                    outputG = F.softmax(outputG, dim=1)
                    outputD = netD(outputG)
                    outputD = F.softmax(outputD, dim=1)

                    outputD_shape = outputD.size()
                    real_label = torch.ones(outputD_shape[0], outputD_shape[2], outputD_shape[3]).long()
                    lossG_D_ADV = opt.lambdaAD * criterion_BCEND(outputD, real_label)

                    # Semi-Supervised Loss: trust the pixels D believes are real
                    outputG_hardpred = torch.max(outputG, 1)[1]
                    confident = (outputD[:, 1, ...].detach() > 0.5)
                    lossG_D = lossG_D_ADV
                    if confident.any():
                        outputG_lsmax = F.log_softmax(outputG_nosmax, dim=1)
                        picked = outputG_lsmax.gather(1, outputG_hardpred.unsqueeze(1)).squeeze(1)
                        LGsemi = -1 * picked[confident].mean()
                        lossG_D = lossG_D + opt.lambdaSEMI * LGsemi
                    lossG_D.backward(retain_graph=True)
                    lossG_total += lossG_D.item()

        # update network parameters after iter_size weight computation
        optimizerD.step()
        optimizerG.step()

        print('iter %d: lossD %.4f lossG %.4f' % (iter, lossD_total / opt.iter_size, lossG_total / opt.iter_size))
        if iter % opt.decLREvery == 0 and iter > 0:
            opt.lr = opt.lr * 0.1
            adjust_learning_rate(optimizerG, opt.lr)


if __name__ == '__main__':
    random.seed(50)
    torch.manual_seed(0)
    main()
