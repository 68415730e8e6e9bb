# source: https://github.com/Project-MONAI/research-contributions/issues/392
# pattern: SwinUNETR BraTS colab: trainer() calls train_epoch(model, loader, optimizer, epoch, loss_func) once per epoch; its batch loop does forward, Dice loss, backward, optimizer.step() and never clears (the repository's trainer.py has a p.grad = None loop there); reported as "no optimizer.zero_grad() in your tutorial"
# case: bug
# expect: ZG001@63-64
# spread: single
# label: oracle.py: STALE from the second batch on (each step re-applies every earlier batch's Dice-loss gradients)
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

max_epochs = 3
val_every = 2
batch_size = 2


class AverageMeter(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count if self.count > 0 else self.sum


class TinySwinUNETR(nn.Module):
    # stand-in for monai.networks.nets.SwinUNETR(img_size, in_channels=4, out_channels=3, feature_size=48)
    def __init__(self, in_channels=4, out_channels=3, feature_size=4):
        super().__init__()
        self.encoder = nn.Conv3d(in_channels, feature_size, 3, padding=1)
        self.decoder = nn.Conv3d(feature_size, out_channels, 1)

    def forward(self, x):
        return self.decoder(F.gelu(self.encoder(x)))


class DiceLoss(nn.Module):
    # stand-in for monai.losses.DiceLoss(to_onehot_y=False, sigmoid=True)
    def forward(self, logits, target):
        p = torch.sigmoid(logits)
        inter = (p * target).sum(dim=(2, 3, 4))
        denom = p.sum(dim=(2, 3, 4)) + target.sum(dim=(2, 3, 4))
        return (1 - (2 * inter + 1e-5) / (denom + 1e-5)).mean()


def train_epoch(model, loader, optimizer, epoch, loss_func):
    model.train()
    start_time = time.time()
    run_loss = AverageMeter()
    for idx, batch_data in enumerate(loader):
        data, target = batch_data["image"], batch_data["label"]
        logits = model(data)
        loss = loss_func(logits, target)
        loss.backward()
        optimizer.step()
        run_loss.update(loss.item(), n=batch_size)
        print(
            "Epoch {}/{} {}/{}".format(epoch, max_epochs, idx, len(loader)),
            "loss: {:.4f}".format(run_loss.avg),
            "time {:.2f}s".format(time.time() - start_time),
        )
        start_time = time.time()
    return run_loss.avg


def val_epoch(model, loader, epoch, acc_func, model_inferer=None):
    model.eval()
    run_acc = AverageMeter()
    with torch.no_grad():
        for idx, batch_data in enumerate(loader):
            data, target = batch_data["image"], batch_data["label"]
            logits = model_inferer(data)
            acc = acc_func(logits, target)
            run_acc.update(acc.item(), n=1)
    return run_acc.avg


def trainer(model, train_loader, val_loader, optimizer, loss_func, acc_func, scheduler, model_inferer=None,
            start_epoch=0):
    val_acc_max = 0.0
    dices_avg, loss_epochs, trains_epoch = [], [], []
    for epoch in range(start_epoch, max_epochs):
        epoch_time = time.time()
        train_loss = train_epoch(model, train_loader, optimizer, epoch=epoch, loss_func=loss_func)
        print("Final training  {}/{}".format(epoch, max_epochs - 1), "loss: {:.4f}".format(train_loss),
              "time {:.2f}s".format(time.time() - epoch_time))
        if (epoch + 1) % val_every == 0 or epoch == 0:
            loss_epochs.append(train_loss)
            trains_epoch.append(int(epoch))
            val_acc = val_epoch(model, val_loader, epoch=epoch, acc_func=acc_func, model_inferer=model_inferer)
            dices_avg.append(val_acc)
            if val_acc > val_acc_max:
                val_acc_max = val_acc
        scheduler.step()
    return val_acc_max, dices_avg, loss_epochs, trains_epoch


def make_loader(n):
    return [{"image": torch.randn(batch_size, 4, 6, 6, 6),
             "label": (torch.rand(batch_size, 3, 6, 6, 6) > 0.5).float()} for _ in range(n)]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinySwinUNETR()
    dice_loss = DiceLoss()
    dice_acc = lambda logits, target: 1 - dice_loss(logits, target)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max_epochs)
    result = trainer(model, make_loader(4), make_loader(2), optimizer, dice_loss, dice_acc, scheduler,
                     model_inferer=model)
    print(result[0])
