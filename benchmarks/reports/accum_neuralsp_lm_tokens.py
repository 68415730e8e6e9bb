# source: https://github.com/hirofumi0810/neural_sp/commit/da7fe8f9dde535052b59f26e5bb3dec68d83807d
# pattern: LM training loop clears through the LRScheduler wrapper (LRScheduler.zero_grad -> inner optimizer) at the top of every batch while stepping only once accum_n_tokens reaches accum_grad_n_tokens: every window is cut to its last batch
# case: bug
# expect: ZG003@151-160
# spread: multi
# label: oracle.py: LOST (the backward of every batch but the window's last is wiped by the top-of-loop clear)
import argparse

import torch
import torch.nn as nn

torch.manual_seed(1)


def set_optimizer(model, optimizer, lr, weight_decay=0.0):
    parameters = [p for p in model.parameters() if p.requires_grad]
    if optimizer == 'sgd':
        opt = torch.optim.SGD(parameters, lr=lr, weight_decay=weight_decay, nesterov=False)
    elif optimizer == 'momentum':
        opt = torch.optim.SGD(parameters, lr=lr, momentum=0.9, weight_decay=weight_decay)
    elif optimizer == 'adam':
        opt = torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay)
    else:
        raise NotImplementedError(optimizer)
    return opt


class LRScheduler(object):
    """Learning rate scheduler (wrapper for optimizer)."""

    def __init__(self, optimizer, base_lr, warmup_start_lr=0, warmup_n_steps=0):
        self.optimizer = optimizer
        self._step = 0
        self._epoch = 0
        self.base_lr = base_lr
        self.warmup_start_lr = warmup_start_lr
        self.warmup_n_steps = warmup_n_steps
        self.lr = base_lr

    @property
    def n_steps(self):
        return self._step

    @property
    def n_epochs(self):
        return self._epoch

    def step(self):
        self._step += 1
        self.optimizer.step()
        self._warmup_lr()

    def zero_grad(self):
        self.optimizer.zero_grad()

    def _warmup_lr(self):
        if self.warmup_n_steps > 0 and self._step <= self.warmup_n_steps:
            self.lr = (self.base_lr - self.warmup_start_lr) / \
                self.warmup_n_steps * self._step + self.warmup_start_lr
            for param_group in self.optimizer.param_groups:
                param_group['lr'] = self.lr

    def epoch(self):
        self._epoch += 1


class RNNLM(nn.Module):
    def __init__(self, vocab, emb_dim, n_units):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, emb_dim)
        self.rnn = nn.LSTM(emb_dim, n_units, batch_first=True)
        self.output = nn.Linear(n_units, vocab)

    def forward(self, ys, state=None, is_eval=False):
        ys_in, ys_out = ys[:, :-1], ys[:, 1:]
        out, state = self.rnn(self.embed(ys_in), state)
        logits = self.output(out)
        loss = nn.functional.cross_entropy(logits.reshape(-1, self.vocab), ys_out.reshape(-1))
        observation = {'loss.lm': loss.item()}
        return loss, state, observation

    def repackage_state(self, state):
        if state is None:
            return None
        return tuple(s.detach() for s in state)


def build_lm(args):
    return RNNLM(args.vocab, args.emb_dim, args.n_units)


class CustomDataParallel(nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class Dataset(object):
    def __init__(self, n_batches, batch_size, bptt, vocab):
        self.data = [torch.randint(0, vocab, (batch_size, bptt + 1)) for _ in range(n_batches)]
        self.offset = 0

    def __len__(self):
        return len(self.data)

    def next(self):
        ys = self.data[self.offset]
        self.offset += 1
        is_new_epoch = self.offset == len(self.data)
        if is_new_epoch:
            self.offset = 0
        return ys, is_new_epoch


class Reporter(object):
    def __init__(self):
        self.observations = []

    def add(self, observation, is_eval=False):
        self.observations.append(observation)

    def step(self, is_eval=False):
        pass


def main():
    args = argparse.Namespace(vocab=10, emb_dim=4, n_units=4, optimizer='adam', lr=1e-3,
                              weight_decay=0.0, warmup_start_lr=0, warmup_n_steps=0,
                              accum_grad_n_tokens=30, clip_grad_norm=5.0, n_epochs=2,
                              batch_size=2, bptt=4, print_step=100)
    train_set = Dataset(6, args.batch_size, args.bptt, args.vocab)

    model = build_lm(args)
    optimizer = set_optimizer(model, args.optimizer, args.lr, args.weight_decay)
    optimizer = LRScheduler(optimizer, args.lr,
                            warmup_start_lr=args.warmup_start_lr,
                            warmup_n_steps=args.warmup_n_steps)
    model = CustomDataParallel(model)
    reporter = Reporter()

    hidden = None
    accum_n_tokens = 0
    n_steps = 0
    while True:
        ys_train, is_new_epoch = train_set.next()
        accum_n_tokens += sum([len(y) for y in ys_train])
        optimizer.zero_grad()
        loss, hidden, observation = model(ys_train, hidden)
        reporter.add(observation)
        loss.backward()
        loss.detach()  # truncate the graph
        if args.accum_grad_n_tokens == 0 or accum_n_tokens >= args.accum_grad_n_tokens:
            if args.clip_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.module.parameters(), args.clip_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
            accum_n_tokens = 0
        loss_train = loss.item()
        del loss
        hidden = model.module.repackage_state(hidden)
        reporter.step()
        n_steps += 1

        if is_new_epoch:
            optimizer.epoch()
            if optimizer.n_epochs >= args.n_epochs:
                break
    return loss_train


if __name__ == '__main__':
    main()
