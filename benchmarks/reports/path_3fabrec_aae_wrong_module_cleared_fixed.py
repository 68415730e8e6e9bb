# source: https://github.com/browatbn2/3FabRec/issues/7
# pattern: fixed AAEUnsupervisedTraining._run_batch (commit dd3345d): the decoding phase clears saae.Q after update_encoding() has stepped optimizer_E on L_enc, so optimizer_E's second step applies only the reconstruction and adversarial losses
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: AGREE (clean: no STALE, EMPTY, LOST or LEAK)
from argparse import Namespace

import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as td

eps = 1e-8
WITH_LOSS_ZREG = False
ENCODING_DISTRIBUTION = 'normal'
TRAIN, VAL = 'train', 'val'
device = torch.device('cpu')


def loss_recon(X, X_recon, reduction='mean'):
    l1_dist_per_img = torch.abs(X - X_recon).mean(dim=(1, 2, 3))
    return l1_dist_per_img.mean() if reduction == 'mean' else l1_dist_per_img


def set_requires_grad(model, requires_grad):
    for param in model.parameters():
        param.requires_grad = requires_grad


class Batch:
    def __init__(self, data, eval=False):
        self.images = data[0]
        self.target_images = None
        self.eval = eval

    def __len__(self):
        return len(self.images)


class D_net_gauss(nn.Module):
    def __init__(self, z_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(z_dim, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.LeakyReLU(0.2),
                                 nn.Flatten(), nn.Linear(4 * 4 * 4, 1), nn.Sigmoid())

    def forward(self, x):
        return self.net(x)


class AAE(nn.Module):
    def __init__(self, input_size=8, z_dim=4):
        super().__init__()
        self.z_dim = z_dim
        self.input_size = input_size
        # one layer: its backward needs no weight, so the in-place update of optimizer_E inside
        # update_encoding does not break the reconstruction backward under torch >= 1.5
        self.Q = nn.Sequential(nn.Flatten(), nn.Linear(3 * input_size * input_size, z_dim))
        self.P = nn.Sequential(nn.Linear(z_dim, 3 * input_size * input_size), nn.Tanh(),
                               nn.Unflatten(1, (3, input_size, input_size)))
        self.D_z = D_net_gauss(self.z_dim)
        self.D = Discriminator()
        self.total_iter = 0

    def forward(self, X):
        return self.P(self.Q(X))


class AAETraining(object):

    def __init__(self, datasets, args, session_name='debug', workers=0):
        self.args = args
        self.session_name = session_name
        self.datasets = datasets
        self.workers = workers
        self.saae = self._get_network(pretrained=False)

        self.total_iter = 0
        self.iter_in_epoch = 0
        self.epoch = 0
        self.epoch_stats = []

        if ENCODING_DISTRIBUTION == 'normal':
            self.enc_rand = torch.randn
            self.enc_rand_like = torch.randn_like
        else:
            self.enc_rand = torch.rand
            self.enc_rand_like = torch.rand_like

        # Set optimizators
        betas = (self.args.beta1, self.args.beta2)
        Q_params = list(filter(lambda p: p.requires_grad, self.saae.Q.parameters()))
        self.optimizer_E = optim.Adam(Q_params, lr=args.lr, betas=betas)
        self.optimizer_G = optim.Adam(self.saae.P.parameters(), lr=args.lr, betas=betas)
        self.optimizer_D_z = optim.Adam(self.saae.D_z.parameters(), lr=args.lr, betas=betas)
        self.optimizer_D = optim.Adam(self.saae.D.parameters(), lr=args.lr * 0.5, betas=betas)

    def _get_network(self, pretrained):
        raise NotImplementedError

    def _print_interval(self, eval):
        return self.args.print_freq_eval if eval else self.args.print_freq

    def _is_printout_iter(self, eval):
        return (self.iter_in_epoch + 1) % self._print_interval(eval) == 0

    def train(self, num_epochs):
        while num_epochs is None or self.epoch < num_epochs:
            self.epoch_stats = []
            self.saae.train(True)
            self._run_epoch(self.datasets[TRAIN])
            self.epoch += 1

    def update_encoding(self, z_sample):
        stats = {}
        # Discriminator
        if self.iter_in_epoch % 4 == 0:
            z_real = self.enc_rand_like(z_sample).to(device)
            D_real = self.saae.D_z(z_real)
            D_fake = self.saae.D_z(z_sample.detach())
            loss_D_z = -torch.mean(torch.log(D_real + eps) + torch.log(1 - D_fake + eps))
            loss_D_z.backward()
            self.optimizer_D_z.step()
            stats['loss_D_z'] = loss_D_z.item()

        # Encoder gaussian loss
        if self.iter_in_epoch % 2 == 0:
            D_fake = self.saae.D_z(z_sample)
            loss_E = -torch.mean(torch.log(D_fake + eps))
            loss_E.backward(retain_graph=True)
            self.optimizer_E.step()
            stats['loss_E'] = loss_E.item()

        return stats

    def update_gan(self, X_target, X_recon, z_sample, train=True, with_gen_loss=False, w_gen=0.25):
        stats = {}
        # update discriminator
        if self.iter_in_epoch % self.args.update_D_freq == 0:
            self.saae.D.zero_grad()
            err_real = self.saae.D(X_target)
            err_fake = self.saae.D(X_recon.detach())
            loss_D = -torch.mean(torch.log(err_real + eps) + torch.log(1.0 - err_fake + eps))
            if train:
                loss_D.backward()
                self.optimizer_D.step()
            stats.update({'loss_D': loss_D.item(), 'err_real': err_real.mean().item()})

        # update E
        if self.iter_in_epoch % self.args.update_E_freq == 0:
            self.saae.D.zero_grad()
            set_requires_grad(self.saae.D, False)
            err_G_random = self.saae.D(X_recon)
            loss_G = -torch.mean(torch.log(err_G_random + eps))
            set_requires_grad(self.saae.D, True)
            stats.update({'loss_G': loss_G.item(), 'err_fake': loss_G.mean().item()})
            return stats, loss_G


class AAEUnsupervisedTraining(AAETraining):

    def _get_network(self, pretrained):
        return AAE(input_size=self.args.input_size, z_dim=self.args.embedding_dims)

    def _run_epoch(self, dataset, eval=False):
        batchsize = self.args.batchsize_eval if eval else self.args.batchsize
        self.iter_in_epoch = 0
        dataloader = td.DataLoader(dataset, batch_size=batchsize, num_workers=self.workers,
                                   drop_last=True, shuffle=True)
        for data in dataloader:
            self._run_batch(data, eval=eval)
            self.total_iter += 1
            self.saae.total_iter = self.total_iter
            self.iter_in_epoch += 1

    def _run_batch(self, data, eval=False, ds=None):
        iter_stats = {}

        batch = Batch(data, eval=eval)
        X_target = batch.target_images if batch.target_images is not None else batch.images

        self.saae.zero_grad()
        loss = torch.zeros(1, requires_grad=True)

        # Encoding
        with torch.set_grad_enabled(self.args.train_encoder):

            z_sample = self.saae.Q(batch.images)

            # Encoding regularization
            if (not eval or self._is_printout_iter(eval)) and self.args.with_zgan and self.args.train_encoder:
                if WITH_LOSS_ZREG:
                    loss_zreg = torch.abs(z_sample).mean()
                    loss += loss_zreg
                encoding = self.update_encoding(z_sample)
                iter_stats.update(encoding)

        # Decoding
        if not self.args.train_encoder:
            z_sample = z_sample.detach()

        with torch.set_grad_enabled(self.args.train_decoder):

            # reconstruct images
            self.saae.Q.zero_grad()
            X_recon = self.saae.P(z_sample)

            # Reconstruction loss
            loss_rec = loss_recon(X_target, X_recon)
            loss = loss_rec * self.args.w_rec
            iter_stats['loss_recon'] = loss_rec.item()

            # Adversarial loss
            if self.args.with_gan and self.args.train_decoder and self.iter_in_epoch % 1 == 0:
                gan_stats, loss_G = self.update_gan(X_target, X_recon, z_sample, train=not eval,
                                                    with_gen_loss=self.args.with_gen_loss)
                loss += loss_G
                iter_stats.update(gan_stats)

            iter_stats['loss'] = loss.item()

            if self.args.train_decoder:
                loss.backward()

            # Update auto-encoder
            if not eval:
                if self.args.train_encoder:
                    self.optimizer_E.step()
                if self.args.train_decoder:
                    self.optimizer_G.step()

        self.epoch_stats.append(iter_stats)


def run(args):
    torch.manual_seed(0)
    images = torch.rand(16, 3, args.input_size, args.input_size) * 2 - 1
    datasets = {TRAIN: td.TensorDataset(images)}
    fntr = AAEUnsupervisedTraining(datasets, args, session_name='debug')
    fntr.train(num_epochs=args.epochs)


if __name__ == '__main__':
    run(Namespace(lr=2e-4, beta1=0.0, beta2=0.999, input_size=8, embedding_dims=4, batchsize=4,
                  batchsize_eval=4, print_freq=2, print_freq_eval=1, epochs=2, with_zgan=True,
                  train_encoder=True, train_decoder=True, with_gan=True, with_gen_loss=False,
                  w_rec=1.0, update_D_freq=2, update_E_freq=1))
