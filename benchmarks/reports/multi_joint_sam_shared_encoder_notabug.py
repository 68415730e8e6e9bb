# source: https://github.com/computational-cell-analytics/micro-sam/issues/1331
# pattern: JointSamTrainer: one Adam over SAM's parameters plus the UNETR decoder (the UNETR encoder IS sam.image_encoder); per batch zero_grad, interactive loss, backprop (backward+step in the torch_em base trainer), zero_grad, instance loss, backprop: the shared encoder gets two clean updates, as the maintainers intended
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean (each step applies exactly the backward just before it; torch_em's DefaultTrainer is written as a small stand-in)
import contextlib
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class ImageEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 8)

    def forward(self, x):
        return torch.relu(self.proj(x))


class SamStandIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.image_encoder = ImageEncoder()
        self.prompt_encoder = nn.Linear(2, 8)
        self.mask_decoder = nn.Linear(8, 16)
        self.iou_head = nn.Linear(8, 1)

    def forward(self, x, points):
        emb = self.image_encoder(x) + self.prompt_encoder(points)
        return self.mask_decoder(emb), self.iou_head(emb)


class TrainableSAM(nn.Module):
    def __init__(self):
        super().__init__()
        self.sam = SamStandIn()

    def forward(self, x, points):
        return self.sam(x, points)


class UNETR(nn.Module):
    def __init__(self, encoder, out_channels):
        super().__init__()
        self.encoder = encoder
        self.decoder = nn.Linear(8, out_channels * 16)

    def forward(self, x):
        return torch.sigmoid(self.decoder(self.encoder(x)))


class DefaultTrainer:
    """Tiny stand-in of torch_em's DefaultTrainer: fit -> _train_epoch -> _train_epoch_impl(progress, ctx, backprop)."""

    def __init__(self, name, train_loader, val_loader, model, optimizer, device, mixed_precision=False, **unused):
        self.name = name
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.model = model
        self.optimizer = optimizer
        self.device = device
        self.logger = None
        self._iteration = 0
        self.max_iteration = 10 ** 6

    def _backprop(self, loss):
        loss.backward()
        self.optimizer.step()

    def _train_epoch(self, progress):
        return self._train_epoch_impl(progress, contextlib.nullcontext, self._backprop)

    def fit(self, epochs):
        for _ in range(epochs):
            self._train_epoch(progress=None)


class SamTrainer(DefaultTrainer):
    def __init__(self, n_sub_iteration=2, **kwargs):
        super().__init__(**kwargs)
        self.n_sub_iteration = n_sub_iteration

    def _check_input_normalization(self, x, input_check_done):
        return True

    def _interactive_train_iteration(self, x, y):
        points = torch.randn(x.shape[0], 2)
        masks, iou_pred = self.model(x.to(self.device), points)
        mask_loss = F.binary_cross_entropy_with_logits(masks, y.flatten(1))
        true_iou = (torch.sigmoid(masks) > 0.5).float().mean(dim=1, keepdim=True)
        iou_regression_loss = F.mse_loss(iou_pred, true_iou)
        loss = mask_loss + iou_regression_loss
        return loss, mask_loss, iou_regression_loss, iou_pred.mean(), masks.detach()


class JointSamTrainer(SamTrainer):
    def __init__(self, unetr, instance_loss, instance_metric, **kwargs):
        super().__init__(**kwargs)
        self.unetr = unetr
        self.instance_loss = instance_loss
        self.instance_metric = instance_metric

    def _instance_iteration(self, x, y, metric_for_val=False):
        outputs = self.unetr(x.to(self.device))
        loss = self.instance_loss(outputs, y.flatten(1).to(self.device))
        if metric_for_val:
            return loss, self.instance_metric(outputs, y.flatten(1).to(self.device))
        return loss

    def _train_epoch_impl(self, progress, forward_context, backprop):
        self.model.train()
        self.unetr.train()
        input_check_done = False
        n_iter = 0
        t_per_iter = time.time()
        for x, y in self.train_loader:
            labels_instances = y[:, 0, ...]
            labels_for_unetr = y[:, 1:, ...]
            input_check_done = self._check_input_normalization(x, input_check_done)

            self.optimizer.zero_grad()
            with forward_context():
                # 1. the interactive segmentation
                (loss, mask_loss, iou_regression_loss, model_iou,
                 sampled_binary_y) = self._interactive_train_iteration(x, labels_instances)
            backprop(loss)

            self.optimizer.zero_grad()
            with forward_context():
                # 2. the automatic instance segmentation
                unetr_loss = self._instance_iteration(x, labels_for_unetr)
            backprop(unetr_loss)

            self._iteration += 1
            n_iter += 1
            if self._iteration >= self.max_iteration:
                break
        return (time.time() - t_per_iter) / n_iter


def main():
    torch.manual_seed(0)
    device = "cpu"
    model = TrainableSAM()
    unetr = UNETR(encoder=model.sam.image_encoder, out_channels=3)

    joint_model_params = [params for params in model.parameters()]  # sam parameters
    for name, params in unetr.named_parameters():  # unetr's decoder parameters
        if not name.startswith("encoder"):
            joint_model_params.append(params)
    optimizer = torch.optim.Adam(joint_model_params, lr=1e-3)

    train_loader = [(torch.randn(4, 16), torch.rand(4, 4, 16).round()) for _ in range(4)]
    trainer = JointSamTrainer(
        name="joint_sam", train_loader=train_loader, val_loader=[], model=model, optimizer=optimizer,
        device=device, mixed_precision=False, n_sub_iteration=2, unetr=unetr,
        instance_loss=nn.MSELoss(), instance_metric=nn.L1Loss(),
    )
    trainer.fit(3)
    print("done", trainer._iteration)


if __name__ == "__main__":
    main()
