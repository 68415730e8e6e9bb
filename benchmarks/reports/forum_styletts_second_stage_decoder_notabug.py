# source: https://github.com/yl4579/StyleTTS/issues/18
# pattern: StyleTTS second stage: a MultiOptimizer holds one AdamW per module (built by build_optimizer over model[key]); each batch clears all, steps 'discriminator' on d_loss, clears all, then g_loss runs through model.decoder and model.discriminator outside no_grad and only 'predictor' is stepped; asked whether the decoder must be frozen: no, its optimizer never steps in this stage and the next clear wipes what g_loss left in decoder and discriminator (batches skipped by `continue` skip before any backward)
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: optimizer #4 ('discriminator') applies only d_loss backward@L245, #2 ('predictor') only g_loss backward@L267, #3 ('decoder') never steps; oracle.py: clean (the short-clip batch leaves by continue before any backward)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import AdamW


class Munch(dict):
    def __getattr__(self, k):
        return self[k]


class MultiOptimizer:
    def __init__(self, optimizers={}, schedulers={}):
        self.optimizers = optimizers
        self.schedulers = schedulers
        self.keys = list(optimizers.keys())

    def step(self, key=None, scaler=None):
        keys = [key] if key is not None else self.keys
        _ = [self._step(key, scaler) for key in keys]

    def _step(self, key, scaler=None):
        if scaler is not None:
            scaler.step(self.optimizers[key])
            scaler.update()
        else:
            self.optimizers[key].step()

    def zero_grad(self, key=None):
        if key is not None:
            self.optimizers[key].zero_grad()
        else:
            _ = [self.optimizers[key].zero_grad() for key in self.keys]


def build_optimizer(parameters_dict):
    optim = dict([(key, AdamW(params, lr=1e-4, weight_decay=1e-4, betas=(0.0, 0.99), eps=1e-9))
                  for key, params in parameters_dict.items()])
    return MultiOptimizer(optim, {})


C, S, N_MELS = 6, 4, 8


class TextEncoder(nn.Module):
    def __init__(self, n_symbols):
        super().__init__()
        self.embedding = nn.Embedding(n_symbols, C)
        self.proj = nn.Linear(C, C)

    def forward(self, texts, input_lengths, m):
        x = self.proj(self.embedding(texts))
        return x.masked_fill(m.unsqueeze(-1), 0).transpose(1, 2)


class StyleEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(N_MELS, S)

    def forward(self, mel):
        return self.fc(mel.squeeze(1).mean(-1))


class ProsodyPredictor(nn.Module):
    def __init__(self):
        super().__init__()
        self.duration = nn.Linear(C + S, 1)
        self.shared = nn.Linear(C + S, C)
        self.F0_proj = nn.Linear(C, 1)
        self.N_proj = nn.Linear(C, 1)

    def forward(self, t_en, s, input_lengths, alignment, m):
        x = torch.cat([t_en.transpose(1, 2), s.unsqueeze(1).expand(-1, t_en.size(2), -1)], dim=-1)
        d = self.duration(x).squeeze(-1)
        p = self.shared(x).transpose(1, 2) @ alignment
        return d, p

    def F0Ntrain(self, p_en, s):
        h = p_en.transpose(1, 2)
        return self.F0_proj(h).squeeze(-1), self.N_proj(h).squeeze(-1)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(C + 2 + S, 2 * N_MELS)

    def forward(self, asr, F0, N, s):
        T = asr.size(-1)
        x = torch.cat([asr.transpose(1, 2), F0.unsqueeze(-1), N.unsqueeze(-1), s.unsqueeze(1).expand(-1, T, -1)], -1)
        out = self.fc(x).view(asr.size(0), T, 2, N_MELS)
        return out.permute(0, 3, 1, 2).reshape(asr.size(0), N_MELS, 2 * T)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Conv2d(1, 2, 3, padding=1)
        self.l2 = nn.Conv2d(2, 1, 3, padding=1)

    def forward(self, x):
        f1 = F.leaky_relu(self.l1(x), 0.2)
        out = self.l2(f1)
        return out.mean(dim=(1, 2, 3)), [[f1, out]]


class PitchExtractor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(N_MELS, 1)

    def forward(self, mel):
        h = self.fc(mel.squeeze(1).transpose(1, 2)).squeeze(-1)
        return h[:, ::2], None, h


class TextAligner(nn.Module):
    def __init__(self, n_symbols):
        super().__init__()
        self.emb = nn.Embedding(n_symbols, N_MELS)

    def forward(self, mels, mask, texts):
        return None, None, torch.einsum('btc,bcm->btm', self.emb(texts), mels[:, :, ::2])


def build_model(n_symbols):
    return Munch(text_encoder=TextEncoder(n_symbols), style_encoder=StyleEncoder(), predictor=ProsodyPredictor(),
                 decoder=Decoder(), discriminator=Discriminator(), pitch_extractor=PitchExtractor(),
                 text_aligner=TextAligner(n_symbols))


def length_to_mask(lengths):
    mask = torch.arange(int(lengths.max())).unsqueeze(0).expand(lengths.shape[0], -1)
    return torch.gt(mask + 1, lengths.unsqueeze(1))


def maximum_path(attn):
    path = torch.zeros_like(attn)
    path.scatter_(1, attn.argmax(dim=1, keepdim=True), 1.0)
    return path


def log_norm(x):
    return torch.log(torch.exp(x * 0.5).norm(dim=-2, keepdim=True) + 1e-5)


def adv_loss(logits, target):
    targets = torch.full_like(logits, fill_value=target)
    return F.binary_cross_entropy_with_logits(logits, targets)


def r1_reg(d_out, x_in):
    grad_dout = torch.autograd.grad(outputs=d_out.sum(), inputs=x_in, create_graph=True)[0]
    return 0.5 * grad_dout.pow(2).reshape(x_in.size(0), -1).sum(1).mean()


def make_batches(n, n_symbols):
    batches = []
    for i in range(n):
        texts = torch.randint(1, n_symbols, (2, 5))
        input_lengths = torch.tensor([5, 5])
        frames = 20 if i != 1 else 6
        mels = torch.randn(2, N_MELS, frames)
        batches.append([texts, input_lengths, mels, torch.tensor([frames, frames])])
    return batches


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    n_symbols = 10
    epochs = 2
    model = build_model(n_symbols)
    optimizer = build_optimizer({key: model[key].parameters() for key in model})
    criterion = nn.L1Loss()
    train_dataloader = make_batches(4, n_symbols)

    for epoch in range(epochs):
        running_loss = 0
        _ = [model[key].eval() for key in model]
        model.predictor.train()
        model.discriminator.train()
        for i, batch in enumerate(train_dataloader):
            texts, input_lengths, mels, mel_input_length = batch
            with torch.no_grad():
                mask = length_to_mask(mel_input_length // 2)
                try:
                    _, _, s2s_attn_feat = model.text_aligner(mels, mask, texts)
                except Exception:
                    continue
                s2s_attn = F.softmax(s2s_attn_feat, dim=1)
                s2s_attn_mono = maximum_path(s2s_attn)
                m = length_to_mask(input_lengths)
                t_en = model.text_encoder(texts, input_lengths, m)
                asr = (t_en @ s2s_attn_mono)
                d_gt = s2s_attn_mono.sum(axis=-1).detach()
                s = model.style_encoder(mels.unsqueeze(1))

            d, p = model.predictor(t_en, s, input_lengths, s2s_attn_mono, m)

            mel_len = int(mel_input_length.min().item() / 2 - 1)
            en, gt, p_en = [], [], []
            for bib in range(len(mel_input_length)):
                mel_length = int(mel_input_length[bib].item() / 2)
                random_start = np.random.randint(0, mel_length - mel_len)
                en.append(asr[bib, :, random_start:random_start + mel_len])
                p_en.append(p[bib, :, random_start:random_start + mel_len])
                gt.append(mels[bib, :, (random_start * 2):((random_start + mel_len) * 2)])
            en = torch.stack(en)
            p_en = torch.stack(p_en)
            gt = torch.stack(gt).detach()

            if gt.size(-1) < 8:
                continue

            with torch.no_grad():
                s = model.style_encoder(gt.unsqueeze(1))
                F0_real, _, F0 = model.pitch_extractor(gt.unsqueeze(1))
                N_real = log_norm(gt.unsqueeze(1)).squeeze(1).squeeze(1)[:, ::2]
                mel_rec_gt = model.decoder(en, F0_real, N_real, s)

            F0_fake, N_fake = model.predictor.F0Ntrain(p_en, s)
            mel_rec = model.decoder(en, F0_fake, N_fake, s)

            loss_F0_rec = (F.smooth_l1_loss(F0_real, F0_fake)) / 10
            loss_norm_rec = F.smooth_l1_loss(N_real, N_fake)

            # discriminator loss
            optimizer.zero_grad()
            mel_rec_gt.requires_grad_()
            out, _ = model.discriminator(mel_rec_gt.unsqueeze(1))
            loss_real = adv_loss(out, 1)
            loss_reg = r1_reg(out, mel_rec_gt)
            out, _ = model.discriminator(mel_rec.detach().unsqueeze(1))
            loss_fake = adv_loss(out, 0)
            d_loss = loss_real + loss_fake + loss_reg
            d_loss.backward()
            optimizer.step('discriminator')

            # generator loss
            optimizer.zero_grad()
            loss_mel = criterion(mel_rec, mel_rec_gt)
            loss_dur = 0
            for _s2s_pred, _text_input, _text_length in zip(d, d_gt, input_lengths):
                loss_dur += F.l1_loss(_s2s_pred[1:_text_length - 1], _text_input[1:_text_length - 1])
            loss_dur /= texts.size(0)

            with torch.no_grad():
                _, f_real = model.discriminator(mel_rec_gt.unsqueeze(1))
            out_rec, f_fake = model.discriminator(mel_rec.unsqueeze(1))
            loss_adv = adv_loss(out_rec, 1)
            loss_fm = 0
            for m in range(len(f_real)):
                for k in range(len(f_real[m])):
                    loss_fm += torch.mean(torch.abs(f_real[m][k] - f_fake[m][k]))

            g_loss = loss_mel + 0.1 * loss_F0_rec + loss_dur + loss_norm_rec + loss_adv + 0.2 * loss_fm
            running_loss += loss_mel.item()
            g_loss.backward()
            optimizer.step('predictor')
        print('epoch', epoch, running_loss)


if __name__ == '__main__':
    main()
