# source: https://github.com/isht7/pytorch-deeplab-resnet/issues/34
# pattern: iter_size accumulation in a module-level loop: one clear before the loop, then step every iter_size-th iteration, the SGD over the two lr groups (from the get_1x/get_10x generators) rebuilt with the poly lr and that new optimizer cleared right after the step; the maintainer answered the grads are accumulated over iter_size iterations and applied once: not a bug
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
random.seed(0)

args = {'--NoLabels': '3', '--lr': '0.00025', '--iterSize': '3', '--wtDecay': '0.0005',
        '--maxIter': '9'}


def outS(i):
    return int(i)


class Classifier_Module(nn.Module):
    def __init__(self, dilation_series, padding_series, NoLabels):
        super().__init__()
        self.conv2d_list = nn.ModuleList()
        for dilation, padding in zip(dilation_series, padding_series):
            self.conv2d_list.append(nn.Conv2d(4, NoLabels, kernel_size=3, stride=1,
                                              padding=padding, dilation=dilation, bias=True))

    def forward(self, x):
        out = self.conv2d_list[0](x)
        for i in range(len(self.conv2d_list) - 1):
            out += self.conv2d_list[i + 1](x)
        return out


class ResNet(nn.Module):
    def __init__(self, NoLabels):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4, affine=True)
        for i in self.bn1.parameters():
            i.requires_grad = False
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Conv2d(4, 4, 3, padding=1)
        self.layer2 = nn.Conv2d(4, 4, 3, padding=1)
        self.layer3 = nn.Conv2d(4, 4, 3, padding=2, dilation=2)
        self.layer4 = nn.Conv2d(4, 4, 3, padding=4, dilation=4)
        self.layer5 = self._make_pred_layer(Classifier_Module, [1, 2], [1, 2], NoLabels)

    def _make_pred_layer(self, block, dilation_series, padding_series, NoLabels):
        return block(dilation_series, padding_series, NoLabels)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.layer5(x)
        return x


class MS_Deeplab(nn.Module):
    def __init__(self, NoLabels):
        super().__init__()
        self.Scale = ResNet(NoLabels)

    def forward(self, x):
        input_size = x.size()[2]
        self.interp1 = nn.UpsamplingBilinear2d(size=(int(input_size * 0.75) + 1, int(input_size * 0.75) + 1))
        self.interp2 = nn.UpsamplingBilinear2d(size=(int(input_size * 0.5), int(input_size * 0.5)))
        self.interp3 = nn.UpsamplingBilinear2d(size=(outS(input_size), outS(input_size)))
        out = []
        x2 = self.interp1(x)
        x3 = self.interp2(x)
        out.append(self.Scale(x))                   # original scale
        out.append(self.interp3(self.Scale(x2)))    # 0.75x scale
        out.append(self.Scale(x3))                  # 0.5x scale
        x2Out_interp = out[1]
        x3Out_interp = self.interp3(out[2])
        temp1 = torch.max(out[0], x2Out_interp)
        out.append(torch.max(temp1, x3Out_interp))
        return out


def Res_Deeplab(NoLabels=21):
    return MS_Deeplab(NoLabels)


def chunker(seq, size):
    return (seq[pos:pos + size] for pos in range(0, len(seq), size))


def get_data_from_chunk_v2(chunk):
    dim = 8
    images = torch.randn(len(chunk), 3, dim, dim)
    a = outS(dim)
    b = int(dim * 0.5)
    labels = [torch.randint(0, int(args['--NoLabels']), (len(chunk), s, s)) for s in [a, a, b, a]]
    return images, labels


def loss_calc(out, label):
    m = nn.LogSoftmax(dim=1)
    criterion = nn.NLLLoss()
    out = m(out)
    return criterion(out, label)


def lr_poly(base_lr, iter, max_iter, power):
    return base_lr * ((1 - float(iter) / max_iter) ** (power))


def get_1x_lr_params_NOscale(model):
    b = []
    b.append(model.Scale.conv1)
    b.append(model.Scale.bn1)
    b.append(model.Scale.layer1)
    b.append(model.Scale.layer2)
    b.append(model.Scale.layer3)
    b.append(model.Scale.layer4)
    for i in range(len(b)):
        for j in b[i].modules():
            for k in j.parameters(recurse=False):
                if k.requires_grad:
                    yield k


def get_10x_lr_params(model):
    b = []
    b.append(model.Scale.layer5.parameters())
    for j in range(len(b)):
        for i in b[j]:
            yield i


model = Res_Deeplab(int(args['--NoLabels']))

max_iter = int(args['--maxIter'])
batch_size = 1
weight_decay = float(args['--wtDecay'])
base_lr = float(args['--lr'])

model.float()
model.eval()  # use_global_stats = True

img_list = ['img%d' % i for i in range(5)]
data_list = []
for i in range(3):
    random.shuffle(img_list)
    data_list.extend(img_list)

optimizer = optim.SGD([{'params': get_1x_lr_params_NOscale(model), 'lr': base_lr},
                       {'params': get_10x_lr_params(model), 'lr': 10 * base_lr}],
                      lr=base_lr, momentum=0.9, weight_decay=weight_decay)

optimizer.zero_grad()
data_gen = chunker(data_list, batch_size)

for iter in range(max_iter + 1):
    chunk = next(data_gen)

    images, label = get_data_from_chunk_v2(chunk)

    out = model(images)
    loss = loss_calc(out[0], label[0])
    iter_size = int(args['--iterSize'])
    for i in range(len(out) - 1):
        loss = loss + loss_calc(out[i + 1], label[i + 1])
    loss = loss / iter_size
    loss.backward()

    if iter % iter_size == 0:
        optimizer.step()
        lr_ = lr_poly(base_lr, iter, max_iter, 0.9)
        optimizer = optim.SGD([{'params': get_1x_lr_params_NOscale(model), 'lr': lr_},
                               {'params': get_10x_lr_params(model), 'lr': 10 * lr_}],
                              lr=lr_, momentum=0.9, weight_decay=weight_decay)
        optimizer.zero_grad()
