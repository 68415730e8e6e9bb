# source: https://github.com/isl-org/MultiObjectiveOptimization/issues/34
# pattern: MGDA-UB multi-task training: per task, zero_grad then backward of that head's loss to read d loss_t / d z on a detached copy of the shared representation; a last zero_grad before the scaled joint loss's backward and step; maintainers: both clears are necessary
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean (the per-task backwards also write the grad of the rep_variable leaf, which the oracle exempts; the step applies only the joint loss; the full-MGDA branch is off, as in the repository's sample.json)
import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_EPOCHS = 3


class MultiLeNetR(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = nn.Linear(16, 12)
        self.fc = nn.Linear(12, 10)

    def dropout2dwithmask(self, x, mask):
        if mask is None:
            mask = torch.bernoulli(torch.ones(1, x.shape[1]) * 0.5)
        return mask.expand(x.shape)

    def forward(self, x, mask):
        x = F.relu(self.fc0(x))
        mask = self.dropout2dwithmask(x, mask)
        if self.training:
            x = x * mask
        x = F.relu(self.fc(x))
        return x, mask


class MultiLeNetO(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 10)
        self.fc2 = nn.Linear(10, 4)

    def forward(self, x, mask):
        x = F.relu(self.fc1(x))
        if mask is None:
            mask = torch.bernoulli(x.new_full(x.size(), 0.5))
        if self.training:
            x = x * mask
        x = self.fc2(x)
        return F.log_softmax(x, dim=1), mask


def get_model(params):
    model = {}
    model['rep'] = MultiLeNetR()
    if 'L' in params['tasks']:
        model['L'] = MultiLeNetO()
    if 'R' in params['tasks']:
        model['R'] = MultiLeNetO()
    return model


def get_loss(params):
    return {t: F.nll_loss for t in params['tasks']}


class MinNormSolver:
    @staticmethod
    def find_min_norm_element(vecs):
        # two tasks: closed-form min-norm point of the segment between the two gradients
        g1 = torch.cat([g.flatten() for g in vecs[0]])
        g2 = torch.cat([g.flatten() for g in vecs[1]])
        diff = g1 - g2
        denom = diff.dot(diff).item()
        gamma = 0.5 if denom == 0 else min(max((g2 - g1).dot(g2).item() / denom, 0.0), 1.0)
        sol = [gamma, 1.0 - gamma]
        return sol, (gamma * g1 + (1 - gamma) * g2).norm().item()


def gradient_normalizers(grads, losses, normalization_type):
    gn = {}
    for t in grads:
        if normalization_type == 'loss+':
            gn[t] = losses[t] * torch.sqrt(sum(gr.pow(2).sum() for gr in grads[t])).item()
        else:
            gn[t] = 1.0
    return gn


def get_dataset(params):
    batches = []
    for _ in range(4):
        batches.append((torch.randn(6, 16), torch.randint(0, 4, (6,)), torch.randint(0, 4, (6,))))
    return batches


def train_multi_task(params):
    torch.manual_seed(0)
    train_loader = get_dataset(params)
    loss_fn = get_loss(params)

    model = get_model(params)
    model_params = []
    for m in model:
        model_params += model[m].parameters()

    if 'RMSprop' in params['optimizer']:
        optimizer = torch.optim.RMSprop(model_params, lr=params['lr'])
    elif 'Adam' in params['optimizer']:
        optimizer = torch.optim.Adam(model_params, lr=params['lr'])
    elif 'SGD' in params['optimizer']:
        optimizer = torch.optim.SGD(model_params, lr=params['lr'], momentum=0.9)

    tasks = params['tasks']
    all_tasks = params['all_tasks']
    approximate_norm_solution = params['use_approximation']
    n_iter = 0
    for epoch in range(NUM_EPOCHS):
        for m in model:
            model[m].train()

        for batch in train_loader:
            n_iter += 1
            images = batch[0]
            labels = {}
            for i, t in enumerate(all_tasks):
                if t not in tasks:
                    continue
                labels[t] = batch[i + 1]

            loss_data = {}
            grads = {}
            scale = {}
            mask = None
            masks = {}
            if 'mgda' in params['algorithm']:
                if approximate_norm_solution:
                    optimizer.zero_grad()
                    # first compute representations (z), without a graph
                    with torch.no_grad():
                        rep, mask = model['rep'](images, mask)
                    rep_variable = rep.clone().requires_grad_(True)

                    # gradients of each loss function wrt z
                    for t in tasks:
                        optimizer.zero_grad()
                        out_t, masks[t] = model[t](rep_variable, None)
                        loss = loss_fn[t](out_t, labels[t])
                        loss_data[t] = loss.item()
                        loss.backward()
                        grads[t] = [rep_variable.grad.detach().clone()]
                        rep_variable.grad.zero_()
                else:
                    # full MGDA: gradients of each loss wrt the shared parameters
                    for t in tasks:
                        optimizer.zero_grad()
                        rep, mask = model['rep'](images, mask)
                        out_t, masks[t] = model[t](rep, None)
                        loss = loss_fn[t](out_t, labels[t])
                        loss_data[t] = loss.item()
                        loss.backward()
                        grads[t] = []
                        for param in model['rep'].parameters():
                            if param.grad is not None:
                                grads[t].append(param.grad.detach().clone())

                gn = gradient_normalizers(grads, loss_data, params['normalization_type'])
                for t in tasks:
                    for gr_i in range(len(grads[t])):
                        grads[t][gr_i] = grads[t][gr_i] / gn[t]

                sol, min_norm = MinNormSolver.find_min_norm_element([grads[t] for t in tasks])
                for i, t in enumerate(tasks):
                    scale[t] = float(sol[i])
            else:
                for t in tasks:
                    masks[t] = None
                    scale[t] = float(params['scales'][t])

            # scaled back-propagation
            optimizer.zero_grad()
            rep, _ = model['rep'](images, mask)
            for i, t in enumerate(tasks):
                out_t, _ = model[t](rep, masks[t])
                loss_t = loss_fn[t](out_t, labels[t])
                loss_data[t] = loss_t.item()
                if i > 0:
                    loss = loss + scale[t] * loss_t
                else:
                    loss = scale[t] * loss_t
            loss.backward()
            optimizer.step()
        print('epoch', epoch, 'loss', loss.item())


if __name__ == '__main__':
    train_multi_task({
        'optimizer': 'Adam', 'lr': 5e-4, 'tasks': ['L', 'R'], 'all_tasks': ['L', 'R'],
        'normalization_type': 'loss+', 'algorithm': 'mgda', 'use_approximation': True,
        'scales': {'L': 0.5, 'R': 0.5},
    })
