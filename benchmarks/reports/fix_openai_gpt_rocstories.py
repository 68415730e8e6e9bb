# source: https://github.com/huggingface/transformers/issues/340
# pattern: run_openai_gpt.py fine-tuning: the double-heads model computes lm and mc losses in its forward, an OpenAIAdam (a torch Optimizer subclass with warmup and clipping) is built over no-decay parameter groups, and the epoch/batch loop calls backward and step but never clears, so every step reapplies all earlier batches
# case: bug
# expect: ZG001@130-135
# spread: single
# label: oracle.py: STALE from the second step on (OpenAIAdam's step reapplies earlier backwards)
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, RandomSampler, TensorDataset


def warmup_linear(x, warmup=0.002):
    if x < warmup:
        return x / warmup
    return max(1.0 - x, 0.0)


class OpenAIAdam(torch.optim.Optimizer):
    """Adam with a warmup schedule, its own gradient clipping and decoupled weight decay."""

    def __init__(self, params, lr, warmup=-1, t_total=-1, b1=0.9, b2=0.999, e=1e-8,
                 weight_decay=0.0, max_grad_norm=-1):
        defaults = dict(lr=lr, warmup=warmup, t_total=t_total, b1=b1, b2=b2, e=e,
                        weight_decay=weight_decay, max_grad_norm=max_grad_norm)
        super(OpenAIAdam, self).__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state['step'] = 0
                    state['exp_avg'] = torch.zeros_like(p)
                    state['exp_avg_sq'] = torch.zeros_like(p)
                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']
                if group['max_grad_norm'] > 0:
                    torch.nn.utils.clip_grad_norm_(p, group['max_grad_norm'])
                state['step'] += 1
                exp_avg.mul_(group['b1']).add_(grad, alpha=1 - group['b1'])
                exp_avg_sq.mul_(group['b2']).addcmul_(grad, grad, value=1 - group['b2'])
                denom = exp_avg_sq.sqrt().add_(group['e'])
                bias_correction1 = 1 - group['b1'] ** state['step']
                bias_correction2 = 1 - group['b2'] ** state['step']
                if group['t_total'] != -1:
                    lr_scheduled = group['lr'] * warmup_linear(state['step'] / group['t_total'],
                                                               group['warmup'])
                else:
                    lr_scheduled = group['lr']
                step_size = lr_scheduled * math.sqrt(bias_correction2) / bias_correction1
                p.addcdiv_(exp_avg, denom, value=-step_size)
                if group['weight_decay'] > 0:
                    p.add_(p, alpha=-lr_scheduled * group['weight_decay'])
        return loss


class OpenAIGPTDoubleHeadsModel(nn.Module):
    """Tiny transformer stand-in with a language-modeling head and a multiple-choice head."""

    def __init__(self, vocab_size=20, n_embd=8, n_positions=12):
        super(OpenAIGPTDoubleHeadsModel, self).__init__()
        self.tokens_embed = nn.Embedding(vocab_size, n_embd)
        self.positions_embed = nn.Embedding(n_positions, n_embd)
        self.h = nn.Linear(n_embd, n_embd)
        self.LayerNorm = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.multiple_choice_head = nn.Linear(n_embd, 1)

    def forward(self, input_ids, mc_token_mask, lm_labels=None, mc_labels=None):
        positions = torch.arange(input_ids.size(-1)).expand_as(input_ids)
        hidden = self.LayerNorm(torch.tanh(self.h(self.tokens_embed(input_ids) + self.positions_embed(positions))))
        lm_logits = self.lm_head(hidden)
        mc_hidden = (hidden * mc_token_mask.unsqueeze(-1).float()).sum(-2)
        mc_logits = self.multiple_choice_head(mc_hidden).squeeze(-1)
        if lm_labels is not None and mc_labels is not None:
            lm_loss = F.cross_entropy(lm_logits[..., :-1, :].reshape(-1, lm_logits.size(-1)),
                                      lm_labels[..., 1:].reshape(-1), ignore_index=-1)
            mc_loss = F.cross_entropy(mc_logits, mc_labels)
            return [lm_loss, mc_loss]
        return lm_logits, mc_logits


def pre_process_datasets(n_batch, input_len, vocab_size):
    input_ids = torch.randint(0, vocab_size, (n_batch, 2, input_len))
    mc_token_mask = torch.zeros(n_batch, 2, input_len, dtype=torch.long)
    mc_token_mask[:, :, -1] = 1
    lm_labels = input_ids.clone()
    mc_labels = torch.randint(0, 2, (n_batch,))
    return input_ids, mc_token_mask, lm_labels, mc_labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--num_train_epochs', type=int, default=2)
    parser.add_argument('--train_batch_size', type=int, default=4)
    parser.add_argument('--max_grad_norm', type=int, default=1)
    parser.add_argument('--learning_rate', type=float, default=6.25e-3)
    parser.add_argument('--warmup_proportion', type=float, default=0.002)
    parser.add_argument('--weight_decay', type=float, default=0.01)
    parser.add_argument('--lm_coef', type=float, default=0.5)
    args = parser.parse_args([])
    torch.manual_seed(0)

    model = OpenAIGPTDoubleHeadsModel()
    train_data = TensorDataset(*pre_process_datasets(12, 10, 20))
    train_dataloader = DataLoader(train_data, sampler=RandomSampler(train_data), batch_size=args.train_batch_size)

    param_optimizer = list(model.named_parameters())
    no_decay = ['bias', 'LayerNorm.bias', 'LayerNorm.weight']
    optimizer_grouped_parameters = [
        {'params': [p for n, p in param_optimizer if not any(nd in n for nd in no_decay)], 'weight_decay': 0.01},
        {'params': [p for n, p in param_optimizer if any(nd in n for nd in no_decay)], 'weight_decay': 0.0}]
    num_train_optimization_steps = len(train_data) // args.train_batch_size
    optimizer = OpenAIAdam(optimizer_grouped_parameters, lr=args.learning_rate, warmup=args.warmup_proportion,
                           max_grad_norm=args.max_grad_norm, weight_decay=args.weight_decay,
                           t_total=num_train_optimization_steps)

    model.train()
    for _ in range(int(args.num_train_epochs)):
        tr_loss = 0
        nb_tr_examples, nb_tr_steps = 0, 0
        for step, batch in enumerate(train_dataloader):
            input_ids, mc_token_mask, lm_labels, mc_labels = batch
            losses = model(input_ids, mc_token_mask, lm_labels, mc_labels)
            loss = args.lm_coef * losses[0] + losses[1]
            loss.backward()
            optimizer.step()
            tr_loss += loss.item()
            nb_tr_examples += input_ids.size(0)
            nb_tr_steps += 1
        print("train loss %.4f" % (tr_loss / nb_tr_steps))


if __name__ == '__main__':
    main()
