# source: https://github.com/facebookresearch/fairseq/commit/202e0bbee73f70c15cfea1350339e68805a401e2
# pattern: train() buffers --update-freq batches by calling Trainer.train_step(sample, update_params=False); but Trainer._forward calls self.optimizer.zero_grad() on every training forward, so each buffered batch's gradients are wiped by the next one and the FP32 step (in _opt) only applies the last batch
# case: bug
# expect: ZG003@152-232
# spread: multi
# label: oracle.py: LOST (the backward of every buffered batch is wiped by the next _forward's clear before _opt steps)
import argparse
import contextlib
import math
from collections import OrderedDict, defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F


class FairseqOptimizer(object):
    def __init__(self, args, params):
        self.args = args
        self.params = list(params)

    @property
    def optimizer(self):
        return self._optimizer

    def step(self, closure=None):
        return self.optimizer.step(closure)

    def zero_grad(self):
        return self.optimizer.zero_grad()


class FairseqNAG(FairseqOptimizer):
    def __init__(self, args, params):
        super().__init__(args, params)
        self._optimizer = torch.optim.SGD(self.params, lr=args.lr[0], momentum=args.momentum,
                                          nesterov=True)


def build_optimizer(args, params):
    return {'nag': FairseqNAG}[args.optimizer](args, params)


class FixedSchedule(object):
    def __init__(self, args, optimizer):
        self.optimizer = optimizer

    def step_update(self, num_updates):
        return self.optimizer.optimizer.param_groups[0]['lr']


class CrossEntropyCriterion(nn.Module):
    def forward(self, model, sample):
        lprobs = F.log_softmax(model(sample['net_input']), dim=-1)
        loss = F.nll_loss(lprobs, sample['target'], reduction='sum')
        sample_size = sample['ntokens']
        return loss, sample_size, {'loss': loss.item(), 'ntokens': sample['ntokens'],
                                   'sample_size': sample_size}

    @staticmethod
    def aggregate_logging_outputs(logging_outputs):
        loss_sum = sum(log.get('loss', 0) for log in logging_outputs)
        sample_size = sum(log.get('sample_size', 0) for log in logging_outputs)
        return {'loss': loss_sum / max(sample_size, 1) / math.log(2), 'sample_size': sample_size}

    @staticmethod
    def grad_denom(sample_sizes):
        return sum(sample_sizes)


class TranslationTask(object):
    def get_loss(self, model, criterion, sample):
        return criterion(model, sample)


class Trainer(object):
    """Main class for data parallel training."""

    def __init__(self, args, task, model, criterion):
        self.args = args
        self.task = task
        self.model = model
        self.criterion = criterion
        self.meters = OrderedDict()
        self.meters['train_loss'] = []
        self._buffered_stats = defaultdict(lambda: [])
        self._flat_grads = None
        self._num_updates = 0
        self._optimizer = None

    @property
    def optimizer(self):
        if self._optimizer is None:
            self._build_optimizer()
        return self._optimizer

    def _build_optimizer(self):
        self._optimizer = build_optimizer(self.args, self.model.parameters())
        self.lr_scheduler = FixedSchedule(self.args, self._optimizer)

    def train_step(self, sample, update_params=True):
        """Do forward, backward and parameter update."""
        torch.manual_seed(self.args.seed + self.get_num_updates())

        # forward and backward pass
        loss, sample_size, logging_output, oom_fwd = self._forward(sample)
        oom_bwd = self._backward(loss)

        # buffer stats and logging outputs
        self._buffered_stats['sample_sizes'].append(sample_size)
        self._buffered_stats['logging_outputs'].append(logging_output)
        self._buffered_stats['ooms_fwd'].append(oom_fwd)
        self._buffered_stats['ooms_bwd'].append(oom_bwd)

        # update parameters
        if update_params:
            sample_sizes = self._buffered_stats['sample_sizes']
            logging_outputs = self._buffered_stats['logging_outputs']
            ooms_fwd = sum(self._buffered_stats['ooms_fwd'])
            if ooms_fwd == self.args.distributed_world_size:
                print('| WARNING: OOM in all workers, skipping batch')
                self.zero_grad()
                return None

            agg_logging_output = self.criterion.__class__.aggregate_logging_outputs(logging_outputs)
            grad_denom = self.criterion.__class__.grad_denom(sample_sizes)
            try:
                # rescale gradients, then take an optimization step
                self._all_reduce_and_rescale(grad_denom)
                self._opt()
                self.meters['train_loss'].append(agg_logging_output['loss'])
            except OverflowError as e:
                self.zero_grad()
                print('| WARNING: overflow detected, ' + str(e))

            self.clear_buffered_stats()
            return agg_logging_output
        else:
            return None  # buffering updates

    def _forward(self, sample, eval=False):
        loss = None
        sample_size = 0
        logging_output = {'ntokens': sample['ntokens'] if sample is not None else 0}
        oom = 0
        try:
            # prepare model and optimizer
            if eval:
                self.model.eval()
            else:
                self.model.train()
                self.optimizer.zero_grad()

            if sample is not None:
                with torch.no_grad() if eval else contextlib.ExitStack():
                    loss, sample_size, logging_output_ = self.task.get_loss(self.model, self.criterion, sample)
                    logging_output.update(logging_output_)
        except RuntimeError as e:
            if not eval and 'out of memory' in str(e):
                print('| WARNING: ran out of memory, skipping batch')
                oom = 1
                loss = None
            else:
                raise e
        return loss, sample_size, logging_output, oom

    def _backward(self, loss):
        oom = 0
        if loss is not None:
            try:
                loss.backward()
            except RuntimeError as e:
                if 'out of memory' in str(e):
                    print('| WARNING: ran out of memory, skipping batch')
                    oom = 1
                    self.zero_grad()
                else:
                    raise e
        return oom

    def _all_reduce_and_rescale(self, grad_denom):
        grads = [p.grad for p in self.model.parameters() if p.requires_grad]
        flat_grads = torch.cat([g.view(-1) for g in grads])
        flat_grads.div_(grad_denom)
        grad_norm = flat_grads.norm()
        if grad_norm > self.args.clip_norm:
            flat_grads.mul_(self.args.clip_norm / (grad_norm + 1e-6))
        offset = 0
        for g in grads:
            g.copy_(flat_grads[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        return grad_norm

    def _opt(self):
        # take an optimization step
        self.optimizer.step()
        self.zero_grad()
        self._num_updates += 1
        self.lr_scheduler.step_update(self._num_updates)

    def dummy_train_step(self, dummy_batch):
        """Dummy training step for warming caching allocator."""
        self.train_step(dummy_batch, update_params=False)
        self.zero_grad()
        self.clear_buffered_stats()

    def zero_grad(self):
        self.optimizer.zero_grad()

    def clear_buffered_stats(self):
        self._buffered_stats.clear()

    def get_num_updates(self):
        return self._num_updates


def train(args, trainer, task, epoch_itr, epoch):
    """Train the model for one epoch."""
    # update parameters every N batches
    if epoch <= len(args.update_freq):
        update_freq = args.update_freq[epoch - 1]
    else:
        update_freq = args.update_freq[-1]

    num_batches = len(epoch_itr)
    for i, sample in enumerate(epoch_itr):
        if i < num_batches - 1 and (i + 1) % update_freq > 0:
            # buffer updates according to --update-freq
            trainer.train_step(sample, update_params=False)
            continue
        else:
            log_output = trainer.train_step(sample, update_params=True)
        print('| epoch {:03d} | update {} | loss {:.3f}'.format(
            epoch, trainer.get_num_updates(), log_output['loss']))


def make_batches(n, bsz=4, vocab=10, dim=6):
    return [{'net_input': torch.randn(bsz, dim), 'target': torch.randint(0, vocab, (bsz,)),
             'ntokens': bsz} for _ in range(n)]


def main(args):
    torch.manual_seed(args.seed)
    task = TranslationTask()
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 10))
    criterion = CrossEntropyCriterion()
    trainer = Trainer(args, task, model, criterion)

    trainer.dummy_train_step(make_batches(1)[0])
    for epoch in range(1, args.max_epoch + 1):
        train(args, trainer, task, make_batches(5), epoch)


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--lr', type=float, nargs='+', default=[0.25])
    parser.add_argument('--momentum', type=float, default=0.99)
    parser.add_argument('--optimizer', default='nag')
    parser.add_argument('--clip-norm', type=float, default=25.0)
    parser.add_argument('--update-freq', type=int, nargs='+', default=[2])
    parser.add_argument('--max-epoch', type=int, default=2)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--distributed-world-size', type=int, default=1)
    main(parser.parse_args([]))
