# source: https://github.com/ae-foster/pytorch-simclr/issues/4
# pattern: SimCLR encoder + critic trained by LARS-wrapped SGD; the linear-eval classifier has its own L-BFGS optimizer whose closure clears and backpropagates the probe loss on features encoded under torch.no_grad(), so no probe gradient reaches the encoder (maintainer: "no gradients are backpropagating to the ResNet")
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: the encoder SGD applies only the contrastive loss, the L-BFGS only its closure's loss
import torch
import torch.nn as nn
import torch.optim as optim


class LARS:
    """Small stand-in of torchlars.LARS: scales each gradient by a trust ratio, then steps the wrapped optimizer."""

    def __init__(self, optimizer, trust_coef=1e-3):
        self.optim = optimizer
        self.trust_coef = trust_coef

    def zero_grad(self):
        self.optim.zero_grad()

    @torch.no_grad()
    def step(self):
        for group in self.optim.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                p_norm, g_norm = p.norm(), p.grad.norm()
                if p_norm > 0 and g_norm > 0:
                    p.grad.mul_(self.trust_coef * p_norm / g_norm)
        self.optim.step()


class LinearCritic(nn.Module):
    def __init__(self, latent_dim, temperature=1.):
        super().__init__()
        self.temperature = temperature
        self.projection_dim = 6
        self.w1 = nn.Linear(latent_dim, latent_dim, bias=False)
        self.bn1 = nn.BatchNorm1d(latent_dim)
        self.relu = nn.ReLU()
        self.w2 = nn.Linear(latent_dim, self.projection_dim, bias=False)
        self.bn2 = nn.BatchNorm1d(self.projection_dim, affine=False)
        self.cossim = nn.CosineSimilarity(dim=-1)

    def project(self, h):
        return self.bn2(self.w2(self.relu(self.bn1(self.w1(h)))))

    def forward(self, h1, h2):
        z1, z2 = self.project(h1), self.project(h2)
        sim11 = self.cossim(z1.unsqueeze(-2), z1.unsqueeze(-3)) / self.temperature
        sim22 = self.cossim(z2.unsqueeze(-2), z2.unsqueeze(-3)) / self.temperature
        sim12 = self.cossim(z1.unsqueeze(-2), z2.unsqueeze(-3)) / self.temperature
        d = sim12.shape[-1]
        sim11[..., range(d), range(d)] = float('-inf')
        sim22[..., range(d), range(d)] = float('-inf')
        raw_scores1 = torch.cat([sim12, sim11], dim=-1)
        raw_scores2 = torch.cat([sim22, sim12.transpose(-1, -2)], dim=-1)
        raw_scores = torch.cat([raw_scores1, raw_scores2], dim=-2)
        targets = torch.arange(2 * d, dtype=torch.long, device=raw_scores.device)
        return raw_scores, targets


class Encoder(nn.Module):
    def __init__(self, representation_dim=8):
        super().__init__()
        self.representation_dim = representation_dim
        self.body = nn.Sequential(nn.Linear(12, 10), nn.ReLU(), nn.Linear(10, representation_dim))

    def forward(self, x):
        return self.body(x)


def encode_train_set(clftrainloader, device, net):
    net.eval()
    store = []
    with torch.no_grad():
        for batch_idx, (inputs, targets) in enumerate(clftrainloader):
            inputs, targets = inputs.to(device), targets.to(device)
            representation = net(inputs)
            store.append((representation, targets))
    X, y = zip(*store)
    return torch.cat(X, dim=0), torch.cat(y, dim=0)


def train_clf(X, y, representation_dim, num_classes, device, reg_weight=1e-3):
    criterion = nn.CrossEntropyLoss()
    n_lbfgs_steps = 3
    clf = nn.Linear(representation_dim, num_classes).to(device)
    clf_optimizer = optim.LBFGS(clf.parameters(), max_iter=4)
    clf.train()
    for _ in range(n_lbfgs_steps):
        def closure():
            clf_optimizer.zero_grad()
            raw_scores = clf(X)
            loss = criterion(raw_scores, y)
            loss += reg_weight * clf.weight.pow(2).sum()
            loss.backward()
            return loss

        clf_optimizer.step(closure)
    return clf


def test(testloader, device, net, clf):
    net.eval()
    clf.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for inputs, targets in testloader:
            raw_scores = clf(net(inputs.to(device)))
            correct += raw_scores.argmax(1).eq(targets.to(device)).sum().item()
            total += targets.size(0)
    return 100. * correct / total


torch.manual_seed(0)
device = 'cpu'
num_classes = 3
trainloader = [((torch.randn(6, 12), torch.randn(6, 12)), None, None) for _ in range(3)]
clftrainloader = [(torch.randn(6, 12), torch.randint(0, num_classes, (6,))) for _ in range(2)]
testloader = [(torch.randn(6, 12), torch.randint(0, num_classes, (6,)))]

net = Encoder()
critic = LinearCritic(net.representation_dim)
criterion = nn.CrossEntropyLoss()
base_optimizer = optim.SGD(list(net.parameters()) + list(critic.parameters()), lr=0.1, weight_decay=1e-6,
                           momentum=0.9)
encoder_optimizer = LARS(base_optimizer, trust_coef=1e-3)
test_freq = 1


def train(epoch):
    net.train()
    critic.train()
    train_loss = 0
    for batch_idx, (inputs, _, _) in enumerate(trainloader):
        x1, x2 = inputs
        x1, x2 = x1.to(device), x2.to(device)
        encoder_optimizer.zero_grad()
        representation1, representation2 = net(x1), net(x2)
        raw_scores, pseudotargets = critic(representation1, representation2)
        loss = criterion(raw_scores, pseudotargets)
        loss.backward()
        encoder_optimizer.step()
        train_loss += loss.item()
    print('epoch %d loss %.3f' % (epoch, train_loss / (batch_idx + 1)))


best_acc = 0
for epoch in range(0, 3):
    train(epoch)
    if (test_freq > 0) and (epoch % test_freq == (test_freq - 1)):
        X, y = encode_train_set(clftrainloader, device, net)
        clf = train_clf(X, y, net.representation_dim, num_classes, device, reg_weight=1e-5)
        acc = test(testloader, device, net, clf)
        best_acc = max(best_acc, acc)
print('best acc', best_acc)
