# source: https://github.com/ylsung/VL_adapter/issues/19
# pattern: VL-Adapter multitask Trainer.train(): "# self.optim.zero_grad()" is commented out before self.model.train_step(batch) (the task-dispatching VLT5MultiTask computes the loss), which the report reads as "training without clearing"; the clear is the `for param in self.model.parameters(): param.grad = None` loop after optim.step(), over every parameter the AdamW groups hold
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: AGREE (clean: each step applies only its own batch's loss and the adapter z regulariser)
from collections import defaultdict
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class Adapter(nn.Module):
    def __init__(self, dim, reduction=2):
        super().__init__()
        self.down = nn.Linear(dim, dim // reduction)
        self.up = nn.Linear(dim // reduction, dim)
        self.z = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return x + self.z * self.up(F.relu(self.down(x)))


class AdapterController(nn.Module):
    def __init__(self, tasks, dim):
        super().__init__()
        self.adapters = nn.ModuleDict({t: Adapter(dim) for t in tasks})

    def forward(self, x, task):
        return self.adapters[task](x)


class VLT5(nn.Module):
    # stand-in for the T5 backbone with visual embeddings and per-task adapters
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.vis_encoder = nn.Linear(config.feat_dim, config.d_model)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.adapter_controller = AdapterController(config.tasks, config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size)

    def forward(self, input_ids, vis_feats, labels, task):
        h = self.embed_tokens(input_ids).mean(1) + self.vis_encoder(vis_feats).mean(1)
        h = self.adapter_controller(h, task)
        logits = self.lm_head(h)
        return {'loss': F.cross_entropy(logits, labels), 'logits': logits}


class VLT5VQA(VLT5):
    def train_step(self, batch, **kwargs):
        output = self(input_ids=batch['input_ids'], vis_feats=batch['vis_feats'], labels=batch['target_ids'], task='vqa')
        return {'loss': output['loss']}


class VLT5NLVR(VLT5):
    def train_step(self, batch, **kwargs):
        output = self(input_ids=batch['input_ids'], vis_feats=batch['vis_feats'], labels=batch['target_ids'], task='nlvr')
        loss = output['loss']
        return {'loss': loss, 'logits': output['logits']}


class VLT5MultiTask(VLT5):
    def __init__(self, config):
        super().__init__(config)

    def train_step(self, batch, **kwargs):
        task = batch['task']
        if task == 'vqa':
            return VLT5VQA.train_step(self, batch, **kwargs)
        elif task == 'nlvr':
            return VLT5NLVR.train_step(self, batch, **kwargs)


class TrainerBase(object):
    def __init__(self, args, train_loader=None, val_loader=None, test_loader=None, train=True):
        self.args = args
        self.train_loader = train_loader
        self.verbose = True

    def create_optimizer_and_scheduler(self):
        no_decay = ["bias", "LayerNorm.weight"]
        optimizer_grouped_parameters = [
            {"params": [p for n, p in self.model.named_parameters() if not any(nd in n for nd in no_decay)],
             "weight_decay": self.args.weight_decay},
            {"params": [p for n, p in self.model.named_parameters() if any(nd in n for nd in no_decay)],
             "weight_decay": 0.0},
        ]
        optim = torch.optim.AdamW(optimizer_grouped_parameters, lr=self.args.lr, eps=self.args.adam_eps)
        lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optim, lambda step: min(1.0, (step + 1) / self.args.warmup_steps))
        return optim, lr_scheduler


class Trainer(TrainerBase):
    def __init__(self, args, train_loader=None, val_loader=None, test_loader=None, train=True):
        super().__init__(args, train_loader=train_loader, val_loader=val_loader, test_loader=test_loader, train=train)
        config = SimpleNamespace(feat_dim=6, d_model=8, vocab_size=5, tasks=args.tasks)
        self.model = VLT5MultiTask(config)
        if train:
            self.optim, self.lr_scheduler = self.create_optimizer_and_scheduler()

    def train(self):
        global_step = 0
        for epoch in range(self.args.epochs):
            self.model.train()
            task_counter = defaultdict(int)
            epoch_results = {'loss': 0.}

            for step_i, batch in enumerate(self.train_loader):
                task = batch['task']
                task_counter[task] += 1

                # self.optim.zero_grad()
                results = self.model.train_step(batch)

                loss = results['loss']

                if self.args.track_z:
                    reg_loss = 0
                    layer_num = 0
                    for name, sub_module in self.model.named_modules():
                        if isinstance(sub_module, AdapterController):
                            reg_loss += ((sub_module.adapters[task].z) ** 2).mean()
                            layer_num += 1
                    reg_loss = reg_loss / layer_num
                    loss = loss + self.args.lambda_z * reg_loss

                loss.backward()

                loss = loss.detach()

                # Update Parameters
                if self.args.clip_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.clip_grad_norm)

                self.optim.step()

                if self.lr_scheduler:
                    self.lr_scheduler.step()
                for param in self.model.parameters():
                    param.grad = None

                global_step += 1
                for k, v in results.items():
                    if k in epoch_results:
                        epoch_results[k] += v.item()
            print(epoch, dict(task_counter), epoch_results)


def make_loader(tasks, n_batches=4, bs=2):
    batches = []
    for i in range(n_batches):
        batches.append({
            'task': tasks[i % len(tasks)],
            'input_ids': torch.randint(0, 5, (bs, 3)),
            'vis_feats': torch.randn(bs, 2, 6),
            'target_ids': torch.randint(0, 5, (bs,)),
        })
    return batches


if __name__ == '__main__':
    torch.manual_seed(0)
    args = SimpleNamespace(tasks=['vqa', 'nlvr'], epochs=2, lr=1e-3, adam_eps=1e-6, weight_decay=0.01,
                           warmup_steps=2, track_z=True, lambda_z=1e-3, clip_grad_norm=5.0)
    trainer = Trainer(args, train_loader=make_loader(args.tasks), train=True)
    trainer.train()
