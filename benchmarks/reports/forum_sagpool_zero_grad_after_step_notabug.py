# source: https://github.com/inyeoplee77/SAGPool/issues/15
# pattern: SAGPool graph classifier (GCN convolutions and self-attention pooling modules in Net.forward) trained by a module-level epoch loop doing backward, step, then zero_grad at the end of each batch; asked "why zero_grad after step, does it matter?": it does not, the clear still falls between one step and the next backward
# case: trap
# expect: clean
# spread: single
# label: oracle.py: clean (each step applies only its own batch's backward)
import argparse

import torch
import torch.nn.functional as F
from torch.nn import Parameter


class GCNConv(torch.nn.Module):
    # dense stand-in for torch_geometric's GCNConv: x [B, N, F], adj [B, N, N]
    def __init__(self, in_channels, out_channels):
        super(GCNConv, self).__init__()
        self.weight = Parameter(torch.randn(in_channels, out_channels) * 0.3)
        self.bias = Parameter(torch.zeros(out_channels))

    def forward(self, x, adj):
        a = adj + torch.eye(adj.size(-1))
        d = a.sum(-1).clamp(min=1).pow(-0.5)
        a = d.unsqueeze(-1) * a * d.unsqueeze(-2)
        return a @ (x @ self.weight) + self.bias


def topk(score, ratio):
    k = max(1, int(score.size(1) * ratio))
    return score.topk(k, dim=1).indices


def filter_adj(adj, perm):
    idx = perm.unsqueeze(-1).expand(-1, -1, adj.size(-1))
    adj = adj.gather(1, idx)
    idx = perm.unsqueeze(1).expand(-1, adj.size(1), -1)
    return adj.gather(2, idx)


class SAGPool(torch.nn.Module):
    def __init__(self, in_channels, ratio=0.8, Conv=GCNConv, non_linearity=torch.tanh):
        super(SAGPool, self).__init__()
        self.in_channels = in_channels
        self.ratio = ratio
        self.score_layer = Conv(in_channels, 1)
        self.non_linearity = non_linearity

    def forward(self, x, adj):
        score = self.score_layer(x, adj).squeeze(-1)
        perm = topk(score, self.ratio)
        x = x.gather(1, perm.unsqueeze(-1).expand(-1, -1, x.size(-1)))
        x = x * self.non_linearity(score.gather(1, perm)).unsqueeze(-1)
        adj = filter_adj(adj, perm)
        return x, adj, perm


def gmp(x):
    return x.max(dim=1).values


def gap(x):
    return x.mean(dim=1)


class Net(torch.nn.Module):
    def __init__(self, args):
        super(Net, self).__init__()
        self.args = args
        self.num_features = args.num_features
        self.nhid = args.nhid
        self.num_classes = args.num_classes
        self.pooling_ratio = args.pooling_ratio
        self.dropout_ratio = args.dropout_ratio

        self.conv1 = GCNConv(self.num_features, self.nhid)
        self.pool1 = SAGPool(self.nhid, ratio=self.pooling_ratio)
        self.conv2 = GCNConv(self.nhid, self.nhid)
        self.pool2 = SAGPool(self.nhid, ratio=self.pooling_ratio)
        self.conv3 = GCNConv(self.nhid, self.nhid)
        self.pool3 = SAGPool(self.nhid, ratio=self.pooling_ratio)

        self.lin1 = torch.nn.Linear(self.nhid * 2, self.nhid)
        self.lin2 = torch.nn.Linear(self.nhid, self.nhid // 2)
        self.lin3 = torch.nn.Linear(self.nhid // 2, self.num_classes)

    def forward(self, data):
        x, adj = data['x'], data['adj']

        x = F.relu(self.conv1(x, adj))
        x, adj, _ = self.pool1(x, adj)
        x1 = torch.cat([gmp(x), gap(x)], dim=1)

        x = F.relu(self.conv2(x, adj))
        x, adj, _ = self.pool2(x, adj)
        x2 = torch.cat([gmp(x), gap(x)], dim=1)

        x = F.relu(self.conv3(x, adj))
        x, adj, _ = self.pool3(x, adj)
        x3 = torch.cat([gmp(x), gap(x)], dim=1)

        x = x1 + x2 + x3
        x = F.relu(self.lin1(x))
        x = F.dropout(x, p=self.dropout_ratio, training=self.training)
        x = F.relu(self.lin2(x))
        return F.log_softmax(self.lin3(x), dim=-1)


def make_loader(n_batches, batch_size, n_nodes, num_features, num_classes):
    batches = []
    for _ in range(n_batches):
        adj = (torch.rand(batch_size, n_nodes, n_nodes) > 0.6).float()
        adj = ((adj + adj.transpose(1, 2)) > 0).float()
        batches.append({'x': torch.randn(batch_size, n_nodes, num_features), 'adj': adj,
                        'y': torch.randint(0, num_classes, (batch_size,))})
    return batches


parser = argparse.ArgumentParser()
parser.add_argument('--seed', type=int, default=777)
parser.add_argument('--batch_size', type=int, default=4)
parser.add_argument('--lr', type=float, default=0.0005)
parser.add_argument('--weight_decay', type=float, default=0.0001)
parser.add_argument('--nhid', type=int, default=8)
parser.add_argument('--pooling_ratio', type=float, default=0.5)
parser.add_argument('--dropout_ratio', type=float, default=0.5)
parser.add_argument('--epochs', type=int, default=3)
parser.add_argument('--patience', type=int, default=50)
args = parser.parse_args([])
torch.manual_seed(args.seed)
args.num_classes = 2
args.num_features = 5

train_loader = make_loader(4, args.batch_size, 10, args.num_features, args.num_classes)
val_loader = make_loader(2, args.batch_size, 10, args.num_features, args.num_classes)
model = Net(args)
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)


def test(model, loader):
    model.eval()
    correct = 0.
    loss = 0.
    n = 0
    with torch.no_grad():
        for data in loader:
            out = model(data)
            pred = out.max(dim=1)[1]
            correct += pred.eq(data['y']).sum().item()
            loss += F.nll_loss(out, data['y'], reduction='sum').item()
            n += data['y'].size(0)
    return correct / n, loss / n


min_loss = 1e10
patience = 0

for epoch in range(args.epochs):
    model.train()
    for i, data in enumerate(train_loader):
        out = model(data)
        loss = F.nll_loss(out, data['y'])
        print("Training loss:{}".format(loss.item()))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    val_acc, val_loss = test(model, val_loader)
    print("Validation loss:{}\taccuracy:{}".format(val_loss, val_acc))
    if val_loss < min_loss:
        min_loss = val_loss
        patience = 0
    else:
        patience += 1
    if patience > args.patience:
        break
