# source: https://github.com/clovaai/stargan-v2/issues/16
# pattern: StarGAN v2 Solver: compute_g_loss runs x_fake through nets.discriminator without freezing it, so the generator loss writes into D's gradients (and the reference-guided g_loss into the style encoder's); not a bug (maintainer): self._reset_grad() clears every optimizer in self.optims before each backward, so each step applies only its own loss
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: optimizer #3 (discriminator) applies only the d_loss backward calls (L138, L144); #0-#2 (generator, mapping_network, style_encoder) only the g_loss ones (L151, L159); oracle.py: AGREE (clean)
import copy
from argparse import Namespace

import torch
import torch.nn as nn
import torch.nn.functional as F


class Munch(dict):
    def __getattr__(self, name):
        return self[name]

    def __setattr__(self, name, value):
        self[name] = value


class Generator(nn.Module):
    def __init__(self, img_dim, style_dim):
        super().__init__()
        self.encode = nn.Linear(img_dim, 8)
        self.style = nn.Linear(style_dim, 8)
        self.decode = nn.Linear(8, img_dim)

    def forward(self, x, s, masks=None):
        return torch.tanh(self.decode(F.relu(self.encode(x) + self.style(s))))


class MappingNetwork(nn.Module):
    def __init__(self, latent_dim, style_dim, num_domains):
        super().__init__()
        self.shared = nn.Linear(latent_dim, 8)
        self.unshared = nn.ModuleList([nn.Linear(8, style_dim) for _ in range(num_domains)])

    def forward(self, z, y):
        h = F.relu(self.shared(z))
        out = torch.stack([layer(h) for layer in self.unshared], dim=1)
        return out[torch.arange(y.size(0)), y]


class StyleEncoder(nn.Module):
    def __init__(self, img_dim, style_dim, num_domains):
        super().__init__()
        self.shared = nn.Linear(img_dim, 8)
        self.unshared = nn.ModuleList([nn.Linear(8, style_dim) for _ in range(num_domains)])

    def forward(self, x, y):
        h = F.relu(self.shared(x))
        out = torch.stack([layer(h) for layer in self.unshared], dim=1)
        return out[torch.arange(y.size(0)), y]


class Discriminator(nn.Module):
    def __init__(self, img_dim, num_domains):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(img_dim, 8), nn.LeakyReLU(0.2), nn.Linear(8, num_domains))

    def forward(self, x, y):
        out = self.main(x)
        return out[torch.arange(y.size(0)), y]


def build_model(args):
    generator = Generator(args.img_dim, args.style_dim)
    mapping_network = MappingNetwork(args.latent_dim, args.style_dim, args.num_domains)
    style_encoder = StyleEncoder(args.img_dim, args.style_dim, args.num_domains)
    discriminator = Discriminator(args.img_dim, args.num_domains)
    generator_ema = copy.deepcopy(generator)
    mapping_network_ema = copy.deepcopy(mapping_network)
    style_encoder_ema = copy.deepcopy(style_encoder)
    nets = Munch(generator=generator, mapping_network=mapping_network,
                 style_encoder=style_encoder, discriminator=discriminator)
    nets_ema = Munch(generator=generator_ema, mapping_network=mapping_network_ema,
                     style_encoder=style_encoder_ema)
    return nets, nets_ema


def InputFetcher(args):
    while True:
        y_org = torch.randint(0, args.num_domains, (args.batch_size,))
        y_trg = torch.randint(0, args.num_domains, (args.batch_size,))
        yield Munch(x_src=torch.randn(args.batch_size, args.img_dim), y_src=y_org,
                    x_ref=torch.randn(args.batch_size, args.img_dim),
                    x_ref2=torch.randn(args.batch_size, args.img_dim), y_ref=y_trg,
                    z_trg=torch.randn(args.batch_size, args.latent_dim),
                    z_trg2=torch.randn(args.batch_size, args.latent_dim))


class Solver(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.nets, self.nets_ema = build_model(args)
        for name, module in self.nets.items():
            setattr(self, name, module)
        for name, module in self.nets_ema.items():
            setattr(self, name + '_ema', module)

        if args.mode == 'train':
            self.optims = Munch()
            for net in self.nets.keys():
                if net == 'fan':
                    continue
                self.optims[net] = torch.optim.Adam(
                    params=self.nets[net].parameters(),
                    lr=args.f_lr if net == 'mapping_network' else args.lr,
                    betas=[args.beta1, args.beta2],
                    weight_decay=args.weight_decay)

    def _reset_grad(self):
        for optim in self.optims.values():
            optim.zero_grad()

    def train(self):
        args = self.args
        nets = self.nets
        nets_ema = self.nets_ema
        optims = self.optims
        fetcher = InputFetcher(args)
        initial_lambda_ds = args.lambda_ds

        for i in range(args.resume_iter, args.total_iters):
            inputs = next(fetcher)
            x_real, y_org = inputs.x_src, inputs.y_src
            x_ref, x_ref2, y_trg = inputs.x_ref, inputs.x_ref2, inputs.y_ref
            z_trg, z_trg2 = inputs.z_trg, inputs.z_trg2
            masks = None

            # train the discriminator
            d_loss, d_losses_latent = compute_d_loss(
                nets, args, x_real, y_org, y_trg, z_trg=z_trg, masks=masks)
            self._reset_grad()
            d_loss.backward()
            optims.discriminator.step()

            d_loss, d_losses_ref = compute_d_loss(
                nets, args, x_real, y_org, y_trg, x_ref=x_ref, masks=masks)
            self._reset_grad()
            d_loss.backward()
            optims.discriminator.step()

            # train the generator
            g_loss, g_losses_latent = compute_g_loss(
                nets, args, x_real, y_org, y_trg, z_trgs=[z_trg, z_trg2], masks=masks)
            self._reset_grad()
            g_loss.backward()
            optims.generator.step()
            optims.mapping_network.step()
            optims.style_encoder.step()

            g_loss, g_losses_ref = compute_g_loss(
                nets, args, x_real, y_org, y_trg, x_refs=[x_ref, x_ref2], masks=masks)
            self._reset_grad()
            g_loss.backward()
            optims.generator.step()

            # compute moving average of network parameters
            moving_average(nets.generator, nets_ema.generator, beta=0.999)
            moving_average(nets.mapping_network, nets_ema.mapping_network, beta=0.999)
            moving_average(nets.style_encoder, nets_ema.style_encoder, beta=0.999)

            # decay weight for diversity sensitive loss
            if args.lambda_ds > 0:
                args.lambda_ds -= (initial_lambda_ds / args.ds_iter)


def compute_d_loss(nets, args, x_real, y_org, y_trg, z_trg=None, x_ref=None, masks=None):
    assert (z_trg is None) != (x_ref is None)
    # with real images
    x_real.requires_grad_()
    out = nets.discriminator(x_real, y_org)
    loss_real = adv_loss(out, 1)
    loss_reg = r1_reg(out, x_real)

    # with fake images
    with torch.no_grad():
        if z_trg is not None:
            s_trg = nets.mapping_network(z_trg, y_trg)
        else:  # x_ref is not None
            s_trg = nets.style_encoder(x_ref, y_trg)
        x_fake = nets.generator(x_real, s_trg, masks=masks)
    out = nets.discriminator(x_fake, y_trg)
    loss_fake = adv_loss(out, 0)

    loss = loss_real + loss_fake + args.lambda_reg * loss_reg
    return loss, Munch(real=loss_real.item(), fake=loss_fake.item(), reg=loss_reg.item())


def compute_g_loss(nets, args, x_real, y_org, y_trg, z_trgs=None, x_refs=None, masks=None):
    assert (z_trgs is None) != (x_refs is None)
    if z_trgs is not None:
        z_trg, z_trg2 = z_trgs
    if x_refs is not None:
        x_ref, x_ref2 = x_refs

    # adversarial loss
    if z_trgs is not None:
        s_trg = nets.mapping_network(z_trg, y_trg)
    else:
        s_trg = nets.style_encoder(x_ref, y_trg)
    x_fake = nets.generator(x_real, s_trg, masks=masks)
    out = nets.discriminator(x_fake, y_trg)
    loss_adv = adv_loss(out, 1)

    # style reconstruction loss
    s_pred = nets.style_encoder(x_fake, y_trg)
    loss_sty = torch.mean(torch.abs(s_pred - s_trg))

    # diversity sensitive loss
    if z_trgs is not None:
        s_trg2 = nets.mapping_network(z_trg2, y_trg)
    else:
        s_trg2 = nets.style_encoder(x_ref2, y_trg)
    x_fake2 = nets.generator(x_real, s_trg2, masks=masks)
    x_fake2 = x_fake2.detach()
    loss_ds = torch.mean(torch.abs(x_fake - x_fake2))

    # cycle-consistency loss
    s_org = nets.style_encoder(x_real, y_org)
    x_rec = nets.generator(x_fake, s_org, masks=masks)
    loss_cyc = torch.mean(torch.abs(x_rec - x_real))

    loss = loss_adv + args.lambda_sty * loss_sty \
        - args.lambda_ds * loss_ds + args.lambda_cyc * loss_cyc
    return loss, Munch(adv=loss_adv.item(), sty=loss_sty.item(), ds=loss_ds.item(), cyc=loss_cyc.item())


def moving_average(model, model_test, beta=0.999):
    for param, param_test in zip(model.parameters(), model_test.parameters()):
        param_test.data = torch.lerp(param.data, param_test.data, beta)


def adv_loss(logits, target):
    assert target in [1, 0]
    targets = torch.full_like(logits, fill_value=target)
    return F.binary_cross_entropy_with_logits(logits, targets)


def r1_reg(d_out, x_in):
    # zero-centered gradient penalty for real images
    batch_size = x_in.size(0)
    grad_dout = torch.autograd.grad(
        outputs=d_out.sum(), inputs=x_in,
        create_graph=True, retain_graph=True, only_inputs=True
    )[0]
    grad_dout2 = grad_dout.pow(2)
    return 0.5 * grad_dout2.view(batch_size, -1).sum(1).mean(0)


if __name__ == '__main__':
    torch.manual_seed(0)
    args = Namespace(mode='train', img_dim=6, style_dim=4, latent_dim=4, num_domains=2, batch_size=3,
                     lr=1e-4, f_lr=1e-6, beta1=0.0, beta2=0.99, weight_decay=1e-4, lambda_reg=1.0,
                     lambda_sty=1.0, lambda_ds=1.0, lambda_cyc=1.0, ds_iter=100, resume_iter=0, total_iters=4)
    solver = Solver(args)
    solver.train()
