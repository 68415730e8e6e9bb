# source: https://github.com/sql-machine-learning/elasticdl/pull/2426
# pattern: a Horovod-style optimizer wrapper (a class made with type() over the user's SGD) overrides zero_grad, but its super().zero_grad() sits after a raise inside the `if self._handles:` guard, so the train_one_batch step function's clear never clears and every step reapplies all earlier gradients (horovod stood in by tiny single-process functions)
# case: bug
# expect: ZG001@183-191
# spread: multi
# label: oracle.py: STALE at the step in train_one_batch (the clear in train_one_batch is a no-op)
import os
import warnings
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


# ---- stand-in for horovod.torch (one process: allreduce is the identity) ----
class Compression:
    class none:
        @staticmethod
        def compress(tensor):
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor


Average = "average"


def size():
    return 1


def allreduce_async_(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    return tensor.mul_(prescale_factor * postscale_factor / size())


def synchronize(handle):
    return handle


# ---- the elastic optimizer wrapper ----
class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters=None, compression=Compression.none,
                 backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                 global_batch_num_per_step=None, fixed_batch_size=False):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        if named_parameters is None:
            named_parameters = [("allreduce.noname.%s" % i, v)
                                for group in self.param_groups
                                for i, v in enumerate(group["params"])]
        self._parameter_names = {v: k for k, v in named_parameters}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for _, v in named_parameters}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self._handles = {}
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        if size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1":
            self._register_hooks()
        self._fixed_batch_size = fixed_batch_size
        self._global_batch_num_per_step = global_batch_num_per_step
        self._iter_step = 0
        self._update_gradients = True

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)

    def _allreduce_grad_async(self, p):
        tensor, ctx = self._compression.compress(p.grad)
        if self._fixed_batch_size:
            prescale = 1.0 / (self.gradient_predivide_factor * self._global_batch_num_per_step)
            postscale = self.gradient_predivide_factor * size()
        else:
            prescale = 1.0 / self.gradient_predivide_factor
            postscale = self.gradient_predivide_factor * size()
        handle = allreduce_async_(tensor, name=self._parameter_names.get(p), op=self.op,
                                  prescale_factor=prescale, postscale_factor=postscale)
        return handle, ctx

    def synchronize(self):
        for p in self._requires_update - set(self._handles.keys()):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in self._handles.items():
            output = synchronize(handle)
            self._allreduce_delay[p] = self.backward_passes_per_step
            p.grad.set_(self._compression.decompress(output, ctx))
        self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        self._iter_step += 1
        self._update_gradients = not (
            self._fixed_batch_size and self._iter_step % self.backward_passes_per_step != 0)
        if not self._update_gradients:
            return
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("step() after synchronize() without skip_synchronize()")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self):
        if not self._update_gradients:
            return
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() "
                "but before optimizer.step() or optimizer.synchronize().")
            return super(self.__class__, self).zero_grad()


# torch already wraps SGD.step (called through super()) with its step hooks; mark the wrapper's
# step as wrapped too so that one update runs the hooks once, as in a plain torch optimizer
_DistributedOptimizer.step.hooked = True


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         global_batch_num_per_step=None, fixed_batch_size=False):
    global_batch_num_per_step = global_batch_num_per_step or int(os.getenv("WORKER_NUM", 1))
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, global_batch_num_per_step, fixed_batch_size)


# ---- stand-in for the elastic controller (retries a batch on failure) ----
class ElasticController:
    def __init__(self):
        self._model = None
        self._optimizer = None

    def set_broadcast_model(self, model):
        self._model = model

    def set_broadcast_optimizer(self, optimizer):
        self._optimizer = optimizer

    def elastic_run(self, func):
        def wrapped(*args, **kwargs):
            return func(*args, **kwargs)
        return wrapped


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.fc1 = nn.Linear(16, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x):
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def train(dataset, elastic_controller):
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    optimizer = DistributedOptimizer(optimizer, op=Average, fixed_batch_size=True)
    elastic_controller.set_broadcast_model(model)
    elastic_controller.set_broadcast_optimizer(optimizer)
    model.train()
    elastic_train_one_step = elastic_controller.elastic_run(train_one_batch)
    for batch_idx, (data, target) in enumerate(dataset):
        loss = elastic_train_one_step(batch_idx, model, optimizer, data, target)
        print("loss = {:.4f}, batch_index = {}".format(loss.item(), batch_idx))


def train_one_batch(batch_index, model, optimizer, data, target):
    output = model(data)
    loss = F.nll_loss(output, target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss


if __name__ == "__main__":
    torch.manual_seed(0)
    dataset = [(torch.randn(4, 1, 4, 4), torch.randint(0, 4, (4,))) for _ in range(5)]
    train(dataset, ElasticController())
