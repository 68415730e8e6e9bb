# source: https://github.com/yueliu1999/HSAN/issues/6
# pattern: HSAN's epoch loop (encoder module's forward, similarity and infoNCE helpers, sample weights refreshed every few epochs) calls loss.backward() and optimizer.step() but never a zero_grad: asked "model is not converging, is this an error?"
# case: bug
# expect: ZG001@100-101
# spread: single
# label: oracle.py: STALE from the second epoch on (every step re-applies all earlier epochs' gradients)
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim


class hard_sample_aware_network(nn.Module):
    def __init__(self, input_dim, hidden_dim, act, n_num):
        super(hard_sample_aware_network, self).__init__()
        self.AE1 = nn.Linear(input_dim, hidden_dim)
        self.AE2 = nn.Linear(input_dim, hidden_dim)
        self.SE1 = nn.Linear(n_num, hidden_dim)
        self.SE2 = nn.Linear(n_num, hidden_dim)
        self.alpha = nn.Parameter(torch.tensor(0.99))
        self.pos_weight = torch.ones(n_num * 2)
        self.pos_neg_weight = torch.ones([n_num * 2, n_num * 2])
        if act == "ident":
            self.activate = lambda x: x
        if act == "sigmoid":
            self.activate = nn.Sigmoid()

    def forward(self, x, A):
        Z1 = F.normalize(self.activate(self.AE1(x)), dim=1, p=2)
        Z2 = F.normalize(self.activate(self.AE2(x)), dim=1, p=2)
        E1 = F.normalize(self.SE1(A), dim=1, p=2)
        E2 = F.normalize(self.SE2(A), dim=1, p=2)
        return Z1, Z2, E1, E2


def comprehensive_similarity(Z1, Z2, E1, E2, alpha):
    Z1_Z2 = torch.cat([torch.cat([Z1 @ Z1.T, Z1 @ Z2.T], dim=1),
                       torch.cat([Z2 @ Z1.T, Z2 @ Z2.T], dim=1)], dim=0)
    E1_E2 = torch.cat([torch.cat([E1 @ E1.T, E1 @ E2.T], dim=1),
                       torch.cat([E2 @ E1.T, E2 @ E2.T], dim=1)], dim=0)
    return alpha * Z1_Z2 + (1 - alpha) * E1_E2


def hard_sample_aware_infoNCE(S, M, pos_neg_weight, pos_weight, node_num):
    pos_neg = M * torch.exp(S * pos_neg_weight)
    pos = torch.cat([torch.diag(S, node_num), torch.diag(S, -node_num)], dim=0)
    pos = torch.exp(pos * pos_weight)
    neg = torch.sum(pos_neg, dim=1) - pos
    return (-torch.log(pos / (pos + neg))).sum() / (2 * node_num)


def phi(Z, cluster_num):
    # stand-in for k-means: nearest of the first cluster_num rows
    center = Z[:cluster_num].detach()
    P = torch.cdist(Z.detach(), center).argmin(dim=1)
    return P, center


def pseudo_matrix(P, S, node_num):
    P = torch.cat([P, P], dim=0)
    Q = (P == P.unsqueeze(1)).float()
    S_norm = (S - S.min()) / (S.max() - S.min())
    M_mat = torch.abs(Q - S_norm) ** 2
    M = torch.cat([torch.diag(M_mat, node_num), torch.diag(M_mat, -node_num)], dim=0)
    return M, M_mat


def load_graph_data(node_num=12, feat_dim=8):
    X = torch.randn(node_num, feat_dim)
    A = (torch.rand(node_num, node_num) > 0.7).float()
    A = ((A + A.T) > 0).float()
    return X, A, node_num, 3


def laplacian_filtering(A, X, t):
    A_hat = A + torch.eye(A.shape[0])
    d = A_hat.sum(1)
    A_norm = A_hat / torch.sqrt(d.unsqueeze(0) * d.unsqueeze(1))
    for _ in range(t):
        X = A_norm @ X
    return X.float()


if __name__ == '__main__':
    torch.manual_seed(0)
    for seed in range(2):
        X, A, node_num, cluster_num = load_graph_data()
        X_filtered = laplacian_filtering(A, X, 2)

        HSAN = hard_sample_aware_network(input_dim=X.shape[1], hidden_dim=6, act="ident", n_num=node_num)
        optimizer = optim.Adam(HSAN.parameters(), lr=1e-3)
        mask = torch.ones([node_num * 2, node_num * 2]) - torch.eye(node_num * 2)

        for epoch in range(6):
            HSAN.train()
            Z1, Z2, E1, E2 = HSAN(X_filtered, A)
            S = comprehensive_similarity(Z1, Z2, E1, E2, HSAN.alpha)
            loss = hard_sample_aware_infoNCE(S, mask, HSAN.pos_neg_weight, HSAN.pos_weight, node_num)

            loss.backward()
            optimizer.step()

            if epoch % 3 == 0:
                HSAN.eval()
                with torch.no_grad():
                    Z1, Z2, E1, E2 = HSAN(X_filtered, A)
                    S = comprehensive_similarity(Z1, Z2, E1, E2, HSAN.alpha)
                Z = (Z1 + Z2) / 2
                P, center = phi(Z, cluster_num)
                M, M_mat = pseudo_matrix(P, S, node_num)
                HSAN.pos_weight = M.data
                HSAN.pos_neg_weight = M_mat.data
        print("Training complete", seed, loss.item())
