# source: https://github.com/speedinghzl/Pytorch-Deeplab/issues/30
# pattern: DeepLab training: SGD over two parameter groups yielded by helper generators (backbone at 1x lr, classifier layer5 at 10x), a zero_grad before the loop and another at the top of every iteration; asked "zero_grad only once?", withdrawn by the asker ("missed the one in the loop")
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean (each step applies only its own iteration's backward, both groups cleared each iteration)
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data

IGNORE_LABEL = 255
NUM_CLASSES = 3


class Args:
    learning_rate = 2.5e-4
    momentum = 0.9
    weight_decay = 5e-4
    num_steps = 6
    power = 0.9
    batch_size = 2
    save_pred_every = 4


args = Args()


class Classifier_Module(nn.Module):
    def __init__(self, dilation_series, padding_series, num_classes):
        super(Classifier_Module, self).__init__()
        self.conv2d_list = nn.ModuleList()
        for dilation, padding in zip(dilation_series, padding_series):
            self.conv2d_list.append(nn.Conv2d(8, num_classes, kernel_size=3, stride=1,
                                              padding=padding, dilation=dilation, bias=True))

    def forward(self, x):
        out = self.conv2d_list[0](x)
        for i in range(len(self.conv2d_list) - 1):
            out += self.conv2d_list[i + 1](x)
        return out


class ResNet(nn.Module):
    def __init__(self, num_classes):
        super(ResNet, self).__init__()
        self.conv1 = nn.Conv2d(3, 4, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4, affine=True)
        for i in self.bn1.parameters():
            i.requires_grad = False
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Conv2d(4, 4, 3, padding=1)
        self.layer2 = nn.Conv2d(4, 8, 3, padding=1)
        self.layer3 = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.layer4 = nn.Conv2d(8, 8, 3, padding=4, dilation=4)
        self.layer5 = self._make_pred_layer(Classifier_Module, [1, 2], [1, 2], num_classes)

    def _make_pred_layer(self, block, dilation_series, padding_series, num_classes):
        return block(dilation_series, padding_series, num_classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.layer1(x))
        x = self.relu(self.layer2(x))
        x = self.relu(self.layer3(x))
        x = self.relu(self.layer4(x))
        return self.layer5(x)


def Res_Deeplab(num_classes=21):
    return ResNet(num_classes)


class VOCDataSet(data.Dataset):
    def __init__(self, n, crop_size):
        self.images = torch.randn(n, 3, *crop_size)
        self.labels = torch.randint(0, NUM_CLASSES, (n, *crop_size))

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        return self.images[index], self.labels[index], 0, index


def loss_calc(pred, label):
    criterion = torch.nn.CrossEntropyLoss(ignore_index=IGNORE_LABEL)
    return criterion(pred, label.long())


def lr_poly(base_lr, iter, max_iter, power):
    return base_lr * ((1 - float(iter) / max_iter) ** power)


def get_1x_lr_params_NOscale(model):
    b = [model.conv1, model.bn1, model.layer1, model.layer2, model.layer3, model.layer4]
    for i in range(len(b)):
        for j in b[i].modules():
            for k in j.parameters():
                if k.requires_grad:
                    yield k


def get_10x_lr_params(model):
    b = [model.layer5.parameters()]
    for j in range(len(b)):
        for i in b[j]:
            yield i


def adjust_learning_rate(optimizer, i_iter):
    lr = lr_poly(args.learning_rate, i_iter, args.num_steps, args.power)
    optimizer.param_groups[0]['lr'] = lr
    optimizer.param_groups[1]['lr'] = lr * 10


def main():
    input_size = (16, 16)
    model = Res_Deeplab(num_classes=NUM_CLASSES)
    model.train()

    trainloader = data.DataLoader(VOCDataSet(args.num_steps * args.batch_size, input_size),
                                  batch_size=args.batch_size, shuffle=True)

    optimizer = optim.SGD([{'params': get_1x_lr_params_NOscale(model), 'lr': args.learning_rate},
                           {'params': get_10x_lr_params(model), 'lr': 10 * args.learning_rate}],
                          lr=args.learning_rate, momentum=args.momentum, weight_decay=args.weight_decay)
    optimizer.zero_grad()

    interp = nn.Upsample(size=input_size, mode='bilinear', align_corners=True)

    for i_iter, batch in enumerate(trainloader):
        images, labels, _, _ = batch

        optimizer.zero_grad()
        adjust_learning_rate(optimizer, i_iter)
        pred = interp(model(images))
        loss = loss_calc(pred, labels)
        loss.backward()
        optimizer.step()

        print('iter = ', i_iter, 'of', args.num_steps, 'completed, loss = ', loss.item())

        if i_iter >= args.num_steps - 1:
            break
        if i_iter % args.save_pred_every == 0 and i_iter != 0:
            print('taking snapshot ...')


if __name__ == '__main__':
    torch.manual_seed(0)
    main()
