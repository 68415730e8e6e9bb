# source: https://github.com/fungtion/DANN_py3/issues/6
# pattern: DANN (feature extractor + label classifier + domain classifier behind a gradient reversal layer, one module); my_net.zero_grad() clears what the Adam over my_net.parameters() holds, answered "either performs well"
# case: trap
# expect: clean
# spread: single
# label: oracle.py: clean (one optimizer over the whole CNNModel, cleared through the module each iteration)
import math
import random

import torch
import torch.nn as nn
import torch.optim as optim
from torch.autograd import Function


class ReverseLayerF(Function):

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.alpha, None


class CNNModel(nn.Module):

    def __init__(self):
        super().__init__()
        self.feature = nn.Sequential()
        self.feature.add_module('f_fc1', nn.Linear(12, 8))
        self.feature.add_module('f_relu1', nn.ReLU(True))

        self.class_classifier = nn.Sequential()
        self.class_classifier.add_module('c_fc1', nn.Linear(8, 6))
        self.class_classifier.add_module('c_relu1', nn.ReLU(True))
        self.class_classifier.add_module('c_fc2', nn.Linear(6, 4))
        self.class_classifier.add_module('c_softmax', nn.LogSoftmax(dim=1))

        self.domain_classifier = nn.Sequential()
        self.domain_classifier.add_module('d_fc1', nn.Linear(8, 6))
        self.domain_classifier.add_module('d_relu1', nn.ReLU(True))
        self.domain_classifier.add_module('d_fc2', nn.Linear(6, 2))
        self.domain_classifier.add_module('d_softmax', nn.LogSoftmax(dim=1))

    def forward(self, input_data, alpha):
        feature = self.feature(input_data)
        reverse_feature = ReverseLayerF.apply(feature, alpha)
        class_output = self.class_classifier(feature)
        domain_output = self.domain_classifier(reverse_feature)
        return class_output, domain_output


lr = 1e-3
batch_size = 5
n_epoch = 3
random.seed(0)
torch.manual_seed(0)

dataloader_source = [(torch.randn(batch_size, 12), torch.randint(0, 4, (batch_size,))) for _ in range(4)]
dataloader_target = [(torch.randn(batch_size, 12), torch.randint(0, 4, (batch_size,))) for _ in range(4)]

my_net = CNNModel()
optimizer = optim.Adam(my_net.parameters(), lr=lr)
loss_class = torch.nn.NLLLoss()
loss_domain = torch.nn.NLLLoss()

for p in my_net.parameters():
    p.requires_grad = True

for epoch in range(n_epoch):
    len_dataloader = min(len(dataloader_source), len(dataloader_target))
    data_source_iter = iter(dataloader_source)
    data_target_iter = iter(dataloader_target)

    for i in range(len_dataloader):
        p = float(i + epoch * len_dataloader) / n_epoch / len_dataloader
        alpha = 2. / (1. + math.exp(-10 * p)) - 1

        s_img, s_label = next(data_source_iter)
        my_net.zero_grad()
        domain_label = torch.zeros(len(s_label)).long()
        class_output, domain_output = my_net(input_data=s_img, alpha=alpha)
        err_s_label = loss_class(class_output, s_label)
        err_s_domain = loss_domain(domain_output, domain_label)

        t_img, _ = next(data_target_iter)
        domain_label = torch.ones(len(t_img)).long()
        _, domain_output = my_net(input_data=t_img, alpha=alpha)
        err_t_domain = loss_domain(domain_output, domain_label)
        err = err_t_domain + err_s_domain + err_s_label
        err.backward()
        optimizer.step()

    print('epoch %d err_s_label %.4f err_s_domain %.4f err_t_domain %.4f'
          % (epoch, err_s_label.item(), err_s_domain.item(), err_t_domain.item()))
