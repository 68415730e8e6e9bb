# source: https://github.com/anliyuan/Ultralight-Digital-Human/issues/172
# pattern: Ultralight-Digital-Human UNet train(): the L1 pixel loss, the VGG PerceptualLoss (a cut conv stack, not in the optimizer) and the frozen SyncNet's cosine loss are computed first, then optimizer.zero_grad(set_to_none=True), backward and step; asked "shouldn't the clear come before the forward?", it only has to come before the backward
# case: trap
# expect: clean
# spread: single
# label: oracle.py: AGREE (clean: each step applies only its own batch; the VGG and SyncNet gradients reach no optimizer)
import argparse
import os
import random
import tempfile

import torch
import torch.nn as nn
from torch import optim
from torch.utils.data import DataLoader

device = 'cpu'


def get_args():
    parser = argparse.ArgumentParser(description='Train',
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--use_syncnet', action='store_true')
    parser.add_argument('--syncnet_checkpoint', type=str, default="")
    parser.add_argument('--dataset_dir', type=str, default="data")
    parser.add_argument('--save_dir', type=str, default=None)
    parser.add_argument('--see_res', action='store_true')
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--batchsize', type=int, default=1)
    parser.add_argument('--lr', type=float, default=0.001)
    parser.add_argument('--asr', type=str, default="hubert")
    return parser.parse_args(['--use_syncnet', '--syncnet_checkpoint', 'syncnet.pth'])


args = get_args()
use_syncnet = args.use_syncnet


class MyDataset(object):
    # stand-in for the cropped frames, masked references and audio windows
    def __init__(self, dataset_dir, mode):
        self.n = 8
        self.mode = mode

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        img_concat_T = torch.rand(6, 8, 8)
        img_real_T = torch.rand(3, 8, 8)
        audio_feat = torch.randn(4, 4, 4)
        return img_concat_T, img_real_T, audio_feat


class Model(nn.Module):
    # stand-in for the audio-conditioned UNet
    def __init__(self, n_channels=6, mode='hubert'):
        super(Model, self).__init__()
        self.audio_model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16))
        self.inc = nn.Conv2d(n_channels, 8, 3, padding=1)
        self.fuse = nn.Conv2d(8 + 16, 8, 1)
        self.outc = nn.Conv2d(8, 3, 1)

    def forward(self, x, audio_feat):
        a = self.audio_model(audio_feat)
        h = torch.relu(self.inc(x))
        a = a[:, :, None, None].expand(-1, -1, h.shape[2], h.shape[3])
        h = torch.relu(self.fuse(torch.cat([h, a], dim=1)))
        return torch.sigmoid(self.outc(h))


class SyncNet_color(nn.Module):
    # stand-in for the pretrained lip-sync expert (face and audio encoders)
    def __init__(self, mode):
        super(SyncNet_color, self).__init__()
        self.face_encoder = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 16, 16))
        self.audio_encoder = nn.Sequential(nn.Flatten(), nn.Linear(64, 16))

    def forward(self, face_sequences, audio_sequences):
        face_embedding = nn.functional.normalize(self.face_encoder(face_sequences), p=2, dim=1)
        audio_embedding = nn.functional.normalize(self.audio_encoder(audio_sequences), p=2, dim=1)
        return audio_embedding, face_embedding


class PerceptualLoss():

    def contentFunc(self):
        conv_3_3_layer = 3
        # stand-in for vgg19(pretrained=True).features
        cnn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        cnn = cnn.to(device)
        model = nn.Sequential()
        model = model.to(device)
        for i, layer in enumerate(list(cnn)):
            model.add_module(str(i), layer)
            if i == conv_3_3_layer:
                break
        return model

    def __init__(self, loss):
        self.criterion = loss
        self.contentFunc = self.contentFunc()

    def get_loss(self, fakeIm, realIm):
        f_fake = self.contentFunc.forward(fakeIm)
        f_real = self.contentFunc.forward(realIm)
        f_real_no_grad = f_real.detach()
        loss = self.criterion(f_fake, f_real_no_grad)
        return loss


logloss = nn.BCELoss()


def cosine_loss(a, v, y):
    d = nn.functional.cosine_similarity(a, v)
    d = d.clamp(1e-4, 1 - 1e-4)
    loss = logloss(d.unsqueeze(1), y)
    return loss


def train(net, epoch, batch_size, lr):
    content_loss = PerceptualLoss(torch.nn.MSELoss())
    if use_syncnet:
        if args.syncnet_checkpoint == "":
            raise ValueError("Using syncnet, you need to set 'syncnet_checkpoint'.Please check README")
        syncnet = SyncNet_color(args.asr).eval().to(device)
    save_dir = args.save_dir
    if not os.path.exists(save_dir):
        os.mkdir(save_dir)
    dataloader_list = []
    dataset_list = []
    dataset_dir_list = [args.dataset_dir]
    for dataset_dir in dataset_dir_list:
        dataset = MyDataset(dataset_dir, args.asr)
        train_dataloader = DataLoader(dataset, batch_size=2, shuffle=True, drop_last=False, num_workers=0)
        dataloader_list.append(train_dataloader)
        dataset_list.append(dataset)

    optimizer = optim.Adam(net.parameters(), lr=lr)
    criterion = nn.L1Loss()

    for e in range(epoch):
        net.train()
        random_i = random.randint(0, len(dataset_dir_list) - 1)
        dataset = dataset_list[random_i]
        train_dataloader = dataloader_list[random_i]

        for batch in train_dataloader:
            imgs, labels, audio_feat = batch
            imgs = imgs.to(device)
            labels = labels.to(device)
            audio_feat = audio_feat.to(device)
            preds = net(imgs, audio_feat)
            if use_syncnet:
                y = torch.ones([preds.shape[0], 1]).float().to(device)
                a, v = syncnet(preds, audio_feat)
                sync_loss = cosine_loss(a, v, y)
            loss_PerceptualLoss = content_loss.get_loss(preds, labels)
            loss_pixel = criterion(preds, labels)
            if use_syncnet:
                loss = loss_pixel + loss_PerceptualLoss * 0.01 + 10 * sync_loss
            else:
                loss = loss_pixel + loss_PerceptualLoss * 0.01
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        if e % 5 == 0:
            torch.save(net.state_dict(), os.path.join(save_dir, str(e) + '.pth'))


if __name__ == '__main__':
    torch.manual_seed(0)
    random.seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        args.save_dir = os.path.join(tmp, "unet_ckpt")
        net = Model(6, args.asr).to(device)
        train(net, args.epochs, args.batchsize, args.lr)
