# source: https://github.com/facebookresearch/ParlAI/pull/2704
# pattern: TorchGeneratorAgent.train_step (no loop of its own; batch_act calls it once per batch from the world's parley loop) calls self.zero_grad(), then compute_loss, self.backward and self.update_params inside a try whose out-of-memory except skips the batch (moved cuda-buffer resync out of the except in #2704); TorchAgent.zero_grad and update_params both defer while _number_grad_accum != 0, so --update-freq batches accumulate and a skipped batch leaves nothing behind
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: no violation (each step applies exactly the update_freq batches since the last clear; the oversized batch fails in its forward and is skipped)
import torch
import torch.nn as nn
import torch.nn.functional as F


class Batch(dict):
    __getattr__ = dict.get


def build_optimizer(opt, params):
    name = opt.get('optimizer', 'sgd')
    if name == 'adam':
        return torch.optim.Adam(params, lr=opt['learningrate'])
    return torch.optim.SGD(params, lr=opt['learningrate'], momentum=opt.get('momentum', 0))


class TorchAgent:
    def __init__(self, opt):
        self.opt = opt
        self.NULL_IDX = 0
        self._number_grad_accum = 0
        self._number_training_updates = 0
        self.global_metrics = {'skipped_batches': 0, 'updates': 0}
        self.model = self.build_model()
        self.criterion = nn.CrossEntropyLoss(ignore_index=self.NULL_IDX, reduction='sum')
        self.init_optim([p for p in self.model.parameters() if p.requires_grad])

    def init_optim(self, params):
        self.optimizer = build_optimizer(self.opt, params)

    def batchify(self, observations):
        text_vec = torch.stack([obs['text_vec'] for obs in observations])
        label_vec = torch.stack([obs['labels_vec'] for obs in observations])
        return Batch(text_vec=text_vec, label_vec=label_vec)

    def batch_act(self, observations):
        self.is_training = any('labels_vec' in obs for obs in observations)
        batch = self.batchify(observations)
        if self.is_training:
            output = self.train_step(batch)
        else:
            with torch.no_grad():
                output = self.eval_step(batch)
        return output

    def backward(self, loss):
        update_freq = self.opt.get('update_freq', 1)
        if update_freq > 1:
            # gradient accumulation, but still need to average across the minibatches
            loss = loss / update_freq
            self._number_grad_accum = (self._number_grad_accum + 1) % update_freq
        loss.backward()

    def update_params(self):
        update_freq = self.opt.get('update_freq', 1)
        if update_freq > 1:
            # self._number_grad_accum is updated in backward function
            if self._number_grad_accum != 0:
                return
        if self.opt.get('gradient_clip', -1) > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.opt['gradient_clip'])
        self.optimizer.step()
        self._number_training_updates += 1
        self.global_metrics['updates'] += 1

    def zero_grad(self):
        if self._number_grad_accum != 0:
            # if we're accumulating gradients, don't actually zero things out yet.
            return
        self.optimizer.zero_grad()


class Seq2seqModel(nn.Module):
    def __init__(self, vocab, hidden, max_tokens):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)
        self.max_tokens = max_tokens

    def forward(self, xs, ys=None):
        if xs.numel() > self.max_tokens:
            raise RuntimeError('CUDA out of memory. Tried to allocate 1.50 GiB')
        enc, hidden = self.encoder(self.embeddings(xs))
        scores = self.decoder(enc[:, -ys.size(1):, :])
        return scores, scores.argmax(-1), hidden


class TorchGeneratorAgent(TorchAgent):
    def build_model(self):
        return Seq2seqModel(self.opt['vocab'], self.opt['hiddensize'], self.opt['max_tokens'])

    def compute_loss(self, batch):
        scores, preds, _ = self.model(batch.text_vec, ys=batch.label_vec)
        score_view = scores.reshape(-1, scores.size(-1))
        loss = self.criterion(score_view, batch.label_vec.reshape(-1))
        target_tokens = batch.label_vec.ne(self.NULL_IDX).long().sum()
        return loss / target_tokens

    def train_step(self, batch):
        """Train on a single batch of examples."""
        self.model.train()
        self.zero_grad()

        try:
            loss = self.compute_loss(batch)
            self.backward(loss)
            self.update_params()
            oom_sync = False
        except RuntimeError as e:
            # catch out of memory exceptions during fwd/bck (skip batch)
            if 'out of memory' in str(e):
                oom_sync = True
                print('| WARNING: ran out of memory, skipping batch.')
                self.global_metrics['skipped_batches'] += 1
            else:
                raise e

        if oom_sync:
            # moved outside of the try-except so the failed graph can be freed first
            self._init_cuda_buffer()

    def _init_cuda_buffer(self):
        pass


class DialogTeacher:
    def __init__(self, n_batches, bsz, vocab, oversized=(2,)):
        self.batches = []
        for i in range(n_batches):
            text_len = 40 if i in oversized else 6
            self.batches.append([
                {'text_vec': torch.randint(1, vocab, (text_len,)),
                 'labels_vec': torch.randint(1, vocab, (3,))}
                for _ in range(bsz)
            ])

    def __iter__(self):
        return iter(self.batches)


class BatchWorld:
    def __init__(self, teacher, agent):
        self.teacher = teacher
        self.agent = agent

    def parley(self, observations):
        self.agent.batch_act(observations)


class TrainLoop:
    def __init__(self, opt):
        self.opt = opt
        self.agent = TorchGeneratorAgent(opt)
        self.teacher = DialogTeacher(opt['num_batches'], opt['batchsize'], opt['vocab'])
        self.world = BatchWorld(self.teacher, self.agent)

    def train(self):
        for epoch in range(self.opt['num_epochs']):
            for observations in self.teacher:
                self.world.parley(observations)
            print('epoch', epoch, self.agent.global_metrics)


if __name__ == '__main__':
    torch.manual_seed(0)
    opt = {'optimizer': 'sgd', 'learningrate': 0.1, 'momentum': 0.9, 'update_freq': 2,
           'gradient_clip': 0.1, 'vocab': 12, 'hiddensize': 8, 'max_tokens': 100,
           'batchsize': 4, 'num_batches': 5, 'num_epochs': 2}
    TrainLoop(opt).train()
