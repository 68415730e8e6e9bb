# source: https://github.com/median-research-group/LibMTL/commit/b1ff34d1bc72a208ef4f42301e6021db42913653
# pattern: the fix: zero_grad_share_params() and the trainer's clear use set_to_none=False, so the shared grads stay as zero tensors after each task's read and _reset_grad() writes the PCGrad-combined gradient into them before the step
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean; running the script shows the shared encoder moves (the step applies the combined gradient written by _reset_grad)
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 6))

    def forward(self, x):
        return self.net(x)


class AbsWeighting(nn.Module):
    def __init__(self):
        super(AbsWeighting, self).__init__()

    def init_param(self):
        pass

    def _compute_grad_dim(self):
        self.grad_index = [param.data.numel() for param in self.get_share_params()]
        self.grad_dim = sum(self.grad_index)

    def _grad2vec(self):
        grad = torch.zeros(self.grad_dim)
        count = 0
        for param in self.get_share_params():
            if param.grad is not None:
                beg = 0 if count == 0 else sum(self.grad_index[:count])
                end = sum(self.grad_index[:(count + 1)])
                grad[beg:end] = param.grad.data.view(-1)
            count += 1
        return grad

    def _compute_grad(self, losses, mode):
        grads = torch.zeros(self.task_num, self.grad_dim)
        for tn in range(self.task_num):
            if mode == 'backward':
                losses[tn].backward(retain_graph=True) if (tn + 1) != self.task_num else losses[tn].backward()
                grads[tn] = self._grad2vec()
            else:
                raise ValueError('No support {} mode for gradient computation'.format(mode))
            self.zero_grad_share_params()
        return grads

    def _reset_grad(self, new_grads):
        count = 0
        for param in self.get_share_params():
            if param.grad is not None:
                beg = 0 if count == 0 else sum(self.grad_index[:count])
                end = sum(self.grad_index[:(count + 1)])
                param.grad.data = new_grads[beg:end].contiguous().view(param.data.size()).data.clone()
            count += 1


class PCGrad(AbsWeighting):
    def backward(self, losses, **kwargs):
        batch_weight = [1.0] * len(losses)
        self._compute_grad_dim()
        grads = self._compute_grad(losses, mode='backward')
        pc_grads = grads.clone()
        for tn_i in range(self.task_num):
            task_index = list(range(self.task_num))
            random.shuffle(task_index)
            for tn_j in task_index:
                g_ij = torch.dot(pc_grads[tn_i], grads[tn_j])
                if g_ij < 0:
                    pc_grads[tn_i] -= g_ij * grads[tn_j] / (grads[tn_j].norm().pow(2) + 1e-8)
                    batch_weight[tn_j] -= (g_ij / (grads[tn_j].norm().pow(2) + 1e-8)).item()
        new_grads = pc_grads.sum(0)
        self._reset_grad(new_grads)
        return batch_weight


class Trainer(nn.Module):
    def __init__(self, task_dict, weighting, architecture, encoder_class, decoders,
                 rep_grad, multi_input, optim_param, **kwargs):
        super(Trainer, self).__init__()
        self.device = torch.device('cpu')
        self.kwargs = kwargs
        self.task_dict = task_dict
        self.task_num = len(task_dict)
        self.task_name = list(task_dict.keys())
        self.rep_grad = rep_grad
        self.multi_input = multi_input
        self._prepare_model(weighting, architecture, encoder_class, decoders)
        self._prepare_optimizer(optim_param)

    def _prepare_model(self, weighting, architecture, encoder_class, decoders):
        class MTLmodel(architecture, weighting):
            def __init__(self, task_name, encoder_class, decoders, rep_grad, multi_input, device, kwargs):
                super(MTLmodel, self).__init__(task_name, encoder_class, decoders, rep_grad, multi_input, device, **kwargs)
                self.init_param()

        self.model = MTLmodel(task_name=self.task_name, encoder_class=encoder_class, decoders=decoders,
                              rep_grad=self.rep_grad, multi_input=self.multi_input, device=self.device,
                              kwargs=self.kwargs['arch_args'])

    def _prepare_optimizer(self, optim_param):
        optim_dict = {
            'sgd': torch.optim.SGD,
            'adam': torch.optim.Adam,
            'adagrad': torch.optim.Adagrad,
            'rmsprop': torch.optim.RMSprop,
        }
        optim_arg = {k: v for k, v in optim_param.items() if k != 'optim'}
        self.optimizer = optim_dict[optim_param['optim']](self.model.parameters(), **optim_arg)

    def _compute_loss(self, preds, gts):
        return torch.stack([self.task_dict[task]['loss_fn'](preds[task], gts[task]) for task in self.task_name])

    def train(self, train_dataloaders, epochs):
        train_batch = len(train_dataloaders)
        self.batch_weight = torch.zeros(self.task_num, epochs, train_batch)
        for epoch in range(epochs):
            self.model.epoch = epoch
            self.model.train()
            for batch_index in range(train_batch):
                train_inputs, train_gts = train_dataloaders[batch_index]
                train_preds = self.model(train_inputs)
                train_losses = self._compute_loss(train_preds, train_gts)

                self.optimizer.zero_grad(set_to_none=False)
                w = self.model.backward(train_losses, **self.kwargs['weight_args'])
                if w is not None:
                    self.batch_weight[:, epoch, batch_index] = torch.tensor(w)
                self.optimizer.step()
            print('epoch', epoch, [round(l.item(), 4) for l in train_losses])


class AbsArchitecture(nn.Module):
    def __init__(self, task_name, encoder_class, decoders, rep_grad, multi_input, device, **kwargs):
        super(AbsArchitecture, self).__init__()
        self.task_name = task_name
        self.task_num = len(task_name)
        self.encoder_class = encoder_class
        self.decoders = decoders
        self.rep_grad = rep_grad
        self.multi_input = multi_input
        self.device = device
        self.kwargs = kwargs

    def forward(self, inputs, task_name=None):
        out = {}
        s_rep = self.encoder(inputs)
        for tn, task in enumerate(self.task_name):
            if task_name is not None and task != task_name:
                continue
            out[task] = self.decoders[task](s_rep)
        return out

    def get_share_params(self):
        return self.encoder.parameters()

    def zero_grad_share_params(self):
        self.encoder.zero_grad(set_to_none=False)


class HPS(AbsArchitecture):
    def __init__(self, task_name, encoder_class, decoders, rep_grad, multi_input, device, **kwargs):
        super(HPS, self).__init__(task_name, encoder_class, decoders, rep_grad, multi_input, device, **kwargs)
        self.encoder = self.encoder_class()


if __name__ == '__main__':
    torch.manual_seed(0)
    random.seed(0)
    task_dict = {'segment': {'loss_fn': F.mse_loss}, 'depth': {'loss_fn': F.l1_loss}}
    decoders = nn.ModuleDict({task: nn.Linear(6, 3) for task in task_dict})
    loader = [(torch.randn(5, 10), {task: torch.randn(5, 3) for task in task_dict}) for _ in range(4)]
    trainer = Trainer(task_dict=task_dict, weighting=PCGrad, architecture=HPS, encoder_class=Encoder,
                      decoders=decoders, rep_grad=False, multi_input=False,
                      optim_param={'optim': 'adam', 'lr': 1e-3, 'weight_decay': 1e-4},
                      weight_args={}, arch_args={})
    before = [p.detach().clone() for p in trainer.model.encoder.parameters()]
    trainer.train(loader, epochs=3)
    moved = any(not torch.equal(b, p) for b, p in zip(before, trainer.model.encoder.parameters()))
    print('shared encoder moved:', moved)
