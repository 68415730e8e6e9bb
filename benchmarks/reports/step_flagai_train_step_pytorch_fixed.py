# source: https://github.com/FlagAI-Open/FlagAI/issues/570
# pattern: the fix (a6128aeb, 'Update trainer.py'): train_step_pytorch's fp32 branch calls optimizer.zero_grad() right after optimizer.step() again, so each call of the step method from Trainer.train's loop applies one batch
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: no violation (every step applies one batch's backward)
import torch
import torch.nn as nn
import torch.nn.functional as F


class DynamicLossScaler:
    @staticmethod
    def _has_inf_or_nan(x):
        s = float(x.float().sum())
        return s in (float('inf'), -float('inf')) or s != s


def log_dist(msg, ranks=None):
    print(msg)


class TinyClassifier(nn.Module):
    def __init__(self, vocab, hidden, num_labels):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.head = nn.Linear(hidden, num_labels)

    def forward(self, input_ids=None, labels=None, mems=None, **kwargs):
        logits = self.head(self.embed(input_ids).mean(1))
        return {'logits': logits, 'loss': F.cross_entropy(logits, labels)}


def get_optimizer_param_groups(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith('bias') else decay).append(p)
    return [{'params': decay}, {'params': no_decay, 'weight_decay': 0.0}]


def get_optimizer(param_groups, lr, weight_decay, optimizer='adamw'):
    if optimizer == 'adamw':
        return torch.optim.AdamW(param_groups, lr=lr, weight_decay=weight_decay)
    return torch.optim.SGD(param_groups, lr=lr)


class Trainer():
    def __init__(self, env_type='pytorch', epochs=2, lr=1e-3, weight_decay=0.01,
                 fp16=False, clip_grad=1.0, gradient_accumulation_steps=1,
                 log_interval=2, optimizer_type='adamw', pytorch_device='cpu'):
        self.env_type = env_type
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.fp16 = fp16
        self.clip_grad = clip_grad
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.log_interval = log_interval
        self.optimizer_type = optimizer_type
        self.pytorch_device = pytorch_device

    def get_dataloader(self, dataset, shuffle):
        return torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=shuffle)

    def train(self, model=None, optimizer=None, lr_scheduler=None,
              train_dataset=None):
        """Training Loops"""
        if not isinstance(train_dataset, torch.utils.data.DataLoader):
            train_dataloader = self.get_dataloader(train_dataset, True)
        else:
            train_dataloader = train_dataset

        if self.env_type == 'pytorch':
            model.to(self.pytorch_device)
        param_groups = get_optimizer_param_groups(model)
        if optimizer is None and self.epochs > 0:
            optimizer = get_optimizer(param_groups=param_groups, lr=self.lr,
                                      weight_decay=self.weight_decay,
                                      optimizer=self.optimizer_type)
        model.train()

        total_lm_loss = 0.0
        self.iteration = 0
        self.accumulate_count = 0
        for epoch in range(self.epochs):
            log_dist("epoch " + str(epoch))
            for iteration_, batch in enumerate(train_dataloader):
                batch = {
                    x: batch[x].to(torch.device(self.pytorch_device))
                    for x in batch if x not in ['uid', 'meta', 'mode']
                }
                if self.env_type == 'pytorch':
                    lm_loss, _ = self.train_step_pytorch(
                        batch, model, optimizer, lr_scheduler)
                else:
                    raise NotImplementedError(self.env_type)
                if lm_loss is not None:
                    total_lm_loss += lm_loss.data.detach().float()

                if (self.iteration + 1) % self.log_interval == 0:
                    learning_rate = optimizer.param_groups[0]['lr']
                    avg_lm_loss = total_lm_loss.item() / self.log_interval
                    log_dist("iter {} lr {:.2e} loss {:.4f}".format(
                        self.iteration + 1, learning_rate, avg_lm_loss))
                    total_lm_loss = 0.0
                self.iteration += 1

    def train_step_pytorch(self, data, model, optimizer, lr_scheduler, mems=None):
        """Single training step."""
        step_output = self.forward_step(data, model, mems)
        # accumulate gradients
        lm_loss = step_output['loss']
        lm_loss /= self.gradient_accumulation_steps
        reduced_loss = lm_loss.detach().clone().view(1)
        # skip the iter while loss has NAN
        if not DynamicLossScaler._has_inf_or_nan(reduced_loss):
            lm_loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), self.clip_grad)

            # Update parameters.
            if (self.accumulate_count + 1) % self.gradient_accumulation_steps == 0:
                if self.fp16:
                    optimizer.step()
                    optimizer.zero_grad()
                else:
                    optimizer.step()
                    optimizer.zero_grad()
                self.accumulate_count = 0
            else:
                self.accumulate_count += 1
            if lr_scheduler:
                lr_scheduler.step()
        else:
            log_dist("Found NaN loss, skip backward", [0])
            del lm_loss, reduced_loss
            mems = None
            reduced_loss = None
        return reduced_loss, mems

    def forward_step(self, data, model, mems=None):
        """Simple forward step. """
        data['mems'] = mems
        model_output = model(**data)
        return {'loss': model_output['loss'],
                'logits': model_output['logits'].contiguous().float()}


class ToyDataset(torch.utils.data.Dataset):
    def __init__(self, n=12, seq=5, vocab=20):
        self.input_ids = torch.randint(0, vocab, (n, seq))
        self.labels = torch.randint(0, 2, (n,))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {'input_ids': self.input_ids[i], 'labels': self.labels[i]}


if __name__ == '__main__':
    torch.manual_seed(0)
    trainer = Trainer(env_type='pytorch', epochs=2, lr=1e-3, log_interval=2)
    model = TinyClassifier(vocab=20, hidden=8, num_labels=2)
    trainer.train(model, train_dataset=ToyDataset())
