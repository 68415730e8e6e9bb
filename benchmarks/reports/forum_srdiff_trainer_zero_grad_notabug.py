# source: https://github.com/LeiaLi/SRDiff/issues/15
# pattern: Trainer.train() gets (losses, total_loss) from the subclass's training_step (the diffusion model's forward), then optimizer.zero_grad(), backward, step; asked whether the clear must precede the forward: it need not, it only has to precede backward
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean (every step applies only its own batch's total_loss backward)
import torch
import torch.nn as nn
import torch.nn.functional as F

hparams = {
    'batch_size': 4, 'max_updates': 8, 'val_check_interval': 5, 'lr': 2e-4,
    'decay_steps': 100, 'fix_rrdb': True, 'use_rrdb': True, 'timesteps': 10,
    'hidden_size': 8,
}


class Unet(nn.Module):
    def __init__(self, dim, out_dim=3, cond_dim=4):
        super().__init__()
        self.inp = nn.Linear(3 + cond_dim + 1, dim)
        self.out = nn.Linear(dim, out_dim)

    def forward(self, x, t, cond):
        h = torch.cat([x, cond, t.float().unsqueeze(1) / 10], dim=1)
        return self.out(F.silu(self.inp(h)))


class RRDBNet(nn.Module):
    def __init__(self, in_nc, nf):
        super().__init__()
        self.body = nn.Linear(in_nc, nf)

    def forward(self, x):
        return torch.tanh(self.body(x))


class GaussianDiffusion(nn.Module):
    def __init__(self, denoise_fn, rrdb_net, timesteps=10, loss_type='l1'):
        super().__init__()
        self.denoise_fn = denoise_fn
        self.rrdb = rrdb_net
        self.num_timesteps = timesteps
        self.loss_type = loss_type
        betas = torch.linspace(1e-4, 0.02, timesteps)
        self.register_buffer('alphas_cumprod', torch.cumprod(1. - betas, dim=0))

    def q_sample(self, x_start, t, noise):
        a = self.alphas_cumprod[t].unsqueeze(1)
        return a.sqrt() * x_start + (1 - a).sqrt() * noise

    def forward(self, img_hr, img_lr, img_lr_up):
        t = torch.randint(0, self.num_timesteps, (img_hr.shape[0],))
        cond = self.rrdb(img_lr)
        x = img_hr - img_lr_up
        noise = torch.randn_like(x)
        x_noisy = self.q_sample(x, t, noise)
        noise_pred = self.denoise_fn(x_noisy, t, cond)
        if self.loss_type == 'l1':
            loss = (noise - noise_pred).abs().mean()
        else:
            loss = F.mse_loss(noise, noise_pred)
        return {'q': loss}, x_noisy, t


class Trainer:
    def __init__(self):
        self.work_dir = 'unused'
        self.first_val = True

    def build_train_dataloader(self):
        data = [{'img_hr': torch.randn(hparams['batch_size'], 3),
                 'img_lr': torch.randn(hparams['batch_size'], 3),
                 'img_lr_up': torch.randn(hparams['batch_size'], 3)} for _ in range(3)]
        return data

    def build_model(self):
        raise NotImplementedError

    def build_optimizer(self, model):
        raise NotImplementedError

    def build_scheduler(self, optimizer):
        raise NotImplementedError

    def training_step(self, batch):
        raise NotImplementedError

    def validate(self, training_step):
        self.first_val = False

    def train(self):
        model = self.build_model()
        optimizer = self.build_optimizer(model)
        self.global_step = training_step = 0
        self.scheduler = scheduler = self.build_scheduler(optimizer)
        dataloader = self.build_train_dataloader()
        while self.global_step < hparams['max_updates']:
            for batch in dataloader:
                if training_step % hparams['val_check_interval'] == 0:
                    with torch.no_grad():
                        model.eval()
                        self.validate(training_step)
                model.train()
                losses, total_loss = self.training_step(batch)
                optimizer.zero_grad()

                total_loss.backward()
                optimizer.step()
                training_step += 1
                scheduler.step()
                self.global_step = training_step


class SRDiffTrainer(Trainer):
    def build_model(self):
        denoise_fn = Unet(hparams['hidden_size'], out_dim=3, cond_dim=4)
        rrdb = RRDBNet(3, 4) if hparams['use_rrdb'] else None
        self.model = GaussianDiffusion(denoise_fn=denoise_fn, rrdb_net=rrdb,
                                       timesteps=hparams['timesteps'], loss_type='l1')
        return self.model

    def build_optimizer(self, model):
        params = list(model.named_parameters())
        if not hparams['fix_rrdb']:
            params = [p for p in params if 'rrdb' not in p[0]]
        params = [p[1] for p in params]
        return torch.optim.Adam(params, lr=hparams['lr'])

    def build_scheduler(self, optimizer):
        return torch.optim.lr_scheduler.StepLR(optimizer, hparams['decay_steps'], gamma=0.5)

    def training_step(self, batch):
        img_hr = batch['img_hr']
        img_lr = batch['img_lr']
        img_lr_up = batch['img_lr_up']
        losses, _, _ = self.model(img_hr, img_lr, img_lr_up)
        total_loss = sum(losses.values())
        return losses, total_loss


if __name__ == '__main__':
    torch.manual_seed(0)
    trainer = SRDiffTrainer()
    trainer.train()
    print('done', trainer.global_step)
