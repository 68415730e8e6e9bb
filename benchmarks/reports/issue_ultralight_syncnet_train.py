# source: https://github.com/anliyuan/Ultralight-Digital-Human/commit/c7f3a9ca6969d61b659c33fd1c01f747a985f701
# pattern: SyncNet training of Ultralight-Digital-Human: train() builds the Dataset, the SyncNet_color model (face and audio conv encoders) and an Adam over its trainable parameters, then for each batch computes the BCE-of-cosine loss through cosine_loss() and calls backward and step, with no clear anywhere; fixed by a helper that clears first
# case: bug
# expect: ZG001@141-142
# spread: single
# label: oracle.py: STALE from the second step on (every step re-applies all earlier batches' gradients)
import argparse
import os
import random
import tempfile

import torch
from torch import nn
from torch import optim
from torch.nn import functional as F
from torch.utils.data import DataLoader


class Dataset(object):
    def __init__(self, dataset_dir, mode):
        # stand-in for the image/landmark lists and the audio feature file
        self.mode = mode
        self.num_frames = 10
        if mode == "wenet":
            self.audio_feats = torch.randn(self.num_frames, 4, 8)
        if mode == "hubert":
            self.audio_feats = torch.randn(self.num_frames, 4, 8)

    def __len__(self):
        return self.audio_feats.shape[0] - 1

    def get_audio_features(self, features, index):
        left = index - 2
        right = index + 2
        pad_left = 0
        pad_right = 0
        if left < 0:
            pad_left = -left
            left = 0
        if right > features.shape[0]:
            pad_right = right - features.shape[0]
            right = features.shape[0]
        auds = features[left:right]
        if pad_left > 0:
            auds = torch.cat([torch.zeros_like(auds[:pad_left]), auds], dim=0)
        if pad_right > 0:
            auds = torch.cat([auds, torch.zeros_like(auds[:pad_right])], dim=0)
        return auds

    def process_img(self, idx):
        # stand-in for the landmark crop of the mouth region
        return torch.rand(3, 8, 8)

    def __getitem__(self, idx):
        img_real_T = self.process_img(idx)
        ex_int = random.randint(0, self.__len__() - 1)
        _ = self.process_img(ex_int)
        audio_feat = self.get_audio_features(self.audio_feats, idx)
        audio_feat = audio_feat.reshape(4, 4, 8)
        y = torch.ones(1).float()
        return img_real_T, audio_feat, y


class Conv2d(nn.Module):
    def __init__(self, cin, cout, kernel_size, stride, padding, residual=False, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.conv_block = nn.Sequential(
            nn.Conv2d(cin, cout, kernel_size, stride, padding),
            nn.BatchNorm2d(cout),
        )
        self.act = nn.ReLU()
        self.residual = residual

    def forward(self, x):
        out = self.conv_block(x)
        if self.residual:
            out += x
        return self.act(out)


class SyncNet_color(nn.Module):
    def __init__(self, mode):
        super(SyncNet_color, self).__init__()

        self.face_encoder = nn.Sequential(
            Conv2d(3, 8, kernel_size=3, stride=1, padding=1),
            Conv2d(8, 8, kernel_size=3, stride=1, padding=1, residual=True),
            Conv2d(8, 16, kernel_size=3, stride=2, padding=1),
            Conv2d(16, 16, kernel_size=4, stride=1, padding=0),
        )

        p1 = 8
        p2 = (1, 2)
        if mode == "hubert":
            p1 = 4
            p2 = (2, 2)

        self.audio_encoder = nn.Sequential(
            Conv2d(p1, 8, kernel_size=3, stride=1, padding=1),
            Conv2d(8, 8, kernel_size=3, stride=1, padding=1, residual=True),
            Conv2d(8, 16, kernel_size=3, stride=p2, padding=1),
            Conv2d(16, 16, kernel_size=(2, 4), stride=1, padding=0),
        )

    def forward(self, face_sequences, audio_sequences):
        face_embedding = self.face_encoder(face_sequences)
        audio_embedding = self.audio_encoder(audio_sequences)

        audio_embedding = audio_embedding.view(audio_embedding.size(0), -1)
        face_embedding = face_embedding.view(face_embedding.size(0), -1)

        audio_embedding = F.normalize(audio_embedding, p=2, dim=1)
        face_embedding = F.normalize(face_embedding, p=2, dim=1)

        return audio_embedding, face_embedding


logloss = nn.BCELoss()


def cosine_loss(a, v, y):
    d = nn.functional.cosine_similarity(a, v)
    d = d.clamp(1e-4, 1 - 1e-4)
    loss = logloss(d.unsqueeze(1), y)
    return loss


def train(save_dir, dataset_dir, mode):
    if not os.path.exists(save_dir):
        os.mkdir(save_dir)

    train_dataset = Dataset(dataset_dir, mode=mode)
    train_data_loader = DataLoader(train_dataset, batch_size=3, shuffle=True, num_workers=0)
    model = SyncNet_color(mode)
    optimizer = optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.001)
    for epoch in range(2):
        for batch in train_data_loader:
            imgT, audioT, y = batch
            audio_embedding, face_embedding = model(imgT, audioT)
            loss = cosine_loss(audio_embedding, face_embedding, y)
            loss.backward()
            optimizer.step()
        print(epoch, loss.item())
        torch.save(model.state_dict(), os.path.join(save_dir, str(epoch) + '.pth'))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument('--save_dir', type=str, default=None)
    parser.add_argument('--dataset_dir', type=str, default="data")
    parser.add_argument('--asr', type=str, default="hubert")
    opt = parser.parse_args([])
    torch.manual_seed(0)
    random.seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        train(os.path.join(tmp, "syncnet_ckpt"), opt.dataset_dir, opt.asr)
