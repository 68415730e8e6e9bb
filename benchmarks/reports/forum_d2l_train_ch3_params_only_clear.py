# source: https://github.com/Miraclelucy/dive_into_deep_learning/issues/6
# pattern: train_ch3(net, ..., params=None, lr=None, optimizer=None) clears gradients only through its `params` argument (a p.grad.zero_() loop) and steps the optimizer otherwise; the concise softmax script calls it with params=None and an SGD optimizer, so the optimizer path never clears; the asker saw accuracy fall to 10% in their own copy
# case: bug
# expect: ZG001|ZG004@57-62
# spread: multi
# label: oracle.py: STALE from the second batch on (the optimizer branch re-applies every earlier batch)
import torch
from torch import nn


def load_data_fashion_mnist(batch_size, n_train=3, n_test=2):
    # stand-in for the book helper: a few random 1x28x28 batches with 10 classes
    def make(n):
        return [(torch.randn(batch_size, 1, 28, 28), torch.randint(0, 10, (batch_size,))) for _ in range(n)]
    return make(n_train), make(n_test)


def sgd(params, lr, batch_size):
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size


batch_size = 16
train_iter, test_iter = load_data_fashion_mnist(batch_size)

net = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))


def init_weight(m):
    if type(m) == nn.Linear:
        nn.init.normal_(m.weight, std=0.01)


net.apply(init_weight)
loss = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
num_epochs = 3


def evaluate_accuracy(data_iter, net):
    acc_sum, n = 0.0, 0
    with torch.no_grad():
        for X, y in data_iter:
            acc_sum += (net(X).argmax(dim=1) == y).float().sum().item()
            n += y.shape[0]
    return acc_sum / n


def train_ch3(net, train_iter, test_iter, loss, num_epochs, batch_size,
              params=None, lr=None, optimizer=None):
    for epoch in range(num_epochs):
        train_l_sum, train_acc_sum, n = 0.0, 0.0, 0
        for X, y in train_iter:
            y_hat = net(X)
            l = loss(y_hat, y).sum()
            if params is not None and params[0].grad is not None:
                for param in params:
                    param.grad.data.zero_()
            l.backward()
            if optimizer is not None:
                optimizer.step()
            else:
                sgd(params, lr, batch_size)
            train_l_sum += l.item()
            train_acc_sum += (y_hat.argmax(dim=1) == y).sum().item()
            n += y.shape[0]
        test_acc = evaluate_accuracy(test_iter, net)
        print('epoch %d, loss %.4f, train acc %.3f, test acc %.3f'
              % (epoch + 1, train_l_sum / n, train_acc_sum / n, test_acc))


torch.manual_seed(0)
train_ch3(net, train_iter, test_iter, loss, num_epochs, batch_size, None, 0.3, optimizer)
