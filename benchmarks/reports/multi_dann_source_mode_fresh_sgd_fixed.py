# source: https://github.com/CuthbertCai/pytorch_DANN/commit/540e0c1699eece8496274342e561524429de9210
# pattern: the fix: the per-batch SGD of the source-only / target-only modes is cleared right after it is built, before the class loss's backward
# case: trap
# expect: clean
# spread: single
# label: oracle.py: clean (run in source mode)
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class params:
    epochs = 3
    gamma = 10
    theta = 1
    batch_size = 6
    use_gpu = False


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, constant):
        ctx.constant = constant
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.constant, None

    def grad_reverse(x, constant):
        return GradReverse.apply(x, constant)


class Extractor(nn.Module):
    def __init__(self):
        super(Extractor, self).__init__()
        self.fc1 = nn.Linear(16, 12)
        self.fc2 = nn.Linear(12, 10)
        self.drop = nn.Dropout()

    def forward(self, input):
        x = F.relu(self.fc1(input))
        return F.relu(self.drop(self.fc2(x)))


class Class_classifier(nn.Module):
    def __init__(self):
        super(Class_classifier, self).__init__()
        self.fc1 = nn.Linear(10, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, input):
        logits = F.relu(self.fc1(input))
        return F.log_softmax(self.fc2(logits), 1)


class Domain_classifier(nn.Module):
    def __init__(self):
        super(Domain_classifier, self).__init__()
        self.fc1 = nn.Linear(10, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, input, constant):
        input = GradReverse.grad_reverse(input, constant)
        logits = F.relu(self.fc1(input))
        return F.log_softmax(self.fc2(logits), 1)


def optimizer_scheduler(optimizer, p):
    for param_group in optimizer.param_groups:
        param_group['lr'] = 0.01 / (1. + 10 * p) ** 0.75
    return optimizer


def train(training_mode, feature_extractor, class_classifier, domain_classifier, class_criterion, domain_criterion,
          source_dataloader, target_dataloader, optimizer, epoch):
    feature_extractor.train()
    class_classifier.train()
    domain_classifier.train()

    start_steps = epoch * len(source_dataloader)
    total_steps = params.epochs * len(source_dataloader)

    for batch_idx, (sdata, tdata) in enumerate(zip(source_dataloader, target_dataloader)):

        if training_mode == 'dann':
            p = float(batch_idx + start_steps) / total_steps
            constant = 2. / (1. + math.exp(-params.gamma * p)) - 1

            input1, label1 = sdata
            input2, label2 = tdata
            size = min((input1.shape[0], input2.shape[0]))
            input1, label1 = input1[0:size], label1[0:size]
            input2, label2 = input2[0:size], label2[0:size]

            optimizer = optimizer_scheduler(optimizer, p)
            optimizer.zero_grad()

            source_labels = torch.zeros((input1.size()[0])).type(torch.LongTensor)
            target_labels = torch.ones((input2.size()[0])).type(torch.LongTensor)

            src_feature = feature_extractor(input1)
            tgt_feature = feature_extractor(input2)

            class_preds = class_classifier(src_feature)
            class_loss = class_criterion(class_preds, label1)

            tgt_preds = domain_classifier(tgt_feature, constant)
            src_preds = domain_classifier(src_feature, constant)
            domain_loss = domain_criterion(tgt_preds, target_labels) + domain_criterion(src_preds, source_labels)

            loss = class_loss + params.theta * domain_loss
            loss.backward()
            optimizer.step()

        elif training_mode == 'source':
            input1, label1 = sdata
            size = input1.shape[0]
            input1, label1 = input1[0:size], label1[0:size]

            # setup optimizer
            optimizer = optim.SGD(list(feature_extractor.parameters()) + list(class_classifier.parameters()), lr=0.01, momentum=0.9)
            optimizer.zero_grad()

            src_feature = feature_extractor(input1)
            class_preds = class_classifier(src_feature)
            class_loss = class_criterion(class_preds, label1)

            class_loss.backward()
            optimizer.step()

        elif training_mode == 'target':
            input2, label2 = tdata
            size = input2.shape[0]
            input2, label2 = input2[0:size], label2[0:size]

            # setup optimizer
            optimizer = optim.SGD(list(feature_extractor.parameters()) + list(class_classifier.parameters()), lr=0.01,
                                  momentum=0.9)
            optimizer.zero_grad()

            tgt_feature = feature_extractor(input2)
            class_preds = class_classifier(tgt_feature)
            class_loss = class_criterion(class_preds, label2)

            class_loss.backward()
            optimizer.step()

    print('epoch', epoch, training_mode)


def main(training_mode):
    torch.manual_seed(0)
    src_train_dataloader = [(torch.randn(params.batch_size, 16), torch.randint(0, 4, (params.batch_size,))) for _ in range(4)]
    tgt_train_dataloader = [(torch.randn(params.batch_size, 16), torch.randint(0, 4, (params.batch_size,))) for _ in range(4)]

    feature_extractor = Extractor()
    class_classifier = Class_classifier()
    domain_classifier = Domain_classifier()
    class_criterion = nn.NLLLoss()
    domain_criterion = nn.NLLLoss()

    optimizer = optim.SGD([{'params': feature_extractor.parameters()},
                           {'params': class_classifier.parameters()},
                           {'params': domain_classifier.parameters()}], lr=0.01, momentum=0.9)

    for epoch in range(params.epochs):
        train(training_mode, feature_extractor, class_classifier, domain_classifier, class_criterion, domain_criterion,
              src_train_dataloader, tgt_train_dataloader, optimizer, epoch)


if __name__ == '__main__':
    main("source")
