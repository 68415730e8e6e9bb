# source: https://github.com/GunhoChoi/AnoGAN-Pytorch/issues/1
# pattern: AnoGAN notebook: after GAN training (both optimizers cleared before their own backward), the anomaly-score latent search optimizes z with z_optimizer = Adam([z]) in a loop of loss.backward(); z_optimizer.step() and never clears z.grad, so every step re-applies all earlier iterations' gradients (the reply "z needs back-propagation" does not address it)
# case: bug
# expect: ZG001@128-132
# spread: single
# label: oracle.py: AGREE (STALE at every z_optimizer step after the first, backward at L131)
import torch
import torch.nn as nn
import torch.nn.init as init

epoch = 1
batch_size = 4
learning_rate = 0.0002

train_loader = [(torch.rand(batch_size, 1, 8, 8) * 2 - 1, torch.zeros(batch_size)) for _ in range(3)]


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.layer1 = nn.Sequential(
            nn.Linear(10, 2 * 2 * 8),
            nn.BatchNorm1d(2 * 2 * 8),
            nn.ReLU(),
        )
        self.layer2 = nn.Sequential(
            nn.ConvTranspose2d(8, 4, 3, 2, 1, 1),
            nn.BatchNorm2d(4),
            nn.LeakyReLU(),
        )
        self.layer3 = nn.Sequential(
            nn.ConvTranspose2d(4, 1, 3, 2, 1, 1),
            nn.Tanh(),
        )

    def forward(self, z):
        out = self.layer1(z)
        out = out.view(out.size()[0], 8, 2, 2)
        out = self.layer2(out)
        out = self.layer3(out)
        return out


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.layer1 = nn.Sequential(
            nn.Conv2d(1, 4, 3, stride=2, padding=1),
            nn.BatchNorm2d(4),
            nn.LeakyReLU(),
        )
        self.layer2 = nn.Sequential(
            nn.Conv2d(4, 8, 3, stride=2, padding=1),
            nn.BatchNorm2d(8),
            nn.LeakyReLU(),
        )
        self.fc = nn.Sequential(
            nn.Linear(8 * 2 * 2, 1),
            nn.Sigmoid(),
        )

    def forward(self, x):
        out = self.layer1(x)
        out = self.layer2(out)
        out = out.view(out.size()[0], -1)
        feature = out
        out = self.fc(out)
        return out, feature


torch.manual_seed(0)
generator = Generator()
discriminator = Discriminator()

loss_func = nn.MSELoss()
gen_optim = torch.optim.Adam(generator.parameters(), lr=5 * learning_rate, betas=(0.5, 0.999))
dis_optim = torch.optim.Adam(discriminator.parameters(), lr=learning_rate, betas=(0.5, 0.999))

ones_label = torch.ones(batch_size, 1)
zeros_label = torch.zeros(batch_size, 1)

# train
for i in range(epoch):
    for j, (image, label) in enumerate(train_loader):
        # generator
        gen_optim.zero_grad()
        z = init.normal_(torch.Tensor(batch_size, 10), mean=0, std=0.1)
        gen_fake = generator.forward(z)
        dis_fake, _ = discriminator.forward(gen_fake)
        gen_loss = torch.sum(loss_func(dis_fake, ones_label))  # fake classified as real
        gen_loss.backward(retain_graph=True)
        gen_optim.step()

        # discriminator
        dis_optim.zero_grad()
        z = init.normal_(torch.Tensor(batch_size, 10), mean=0, std=0.1)
        gen_fake = generator.forward(z)
        dis_fake, _ = discriminator.forward(gen_fake)
        dis_real, _ = discriminator.forward(image)
        dis_loss = torch.sum(loss_func(dis_fake, zeros_label)) + torch.sum(loss_func(dis_real, ones_label))
        dis_loss.backward()
        dis_optim.step()


# Lambda = 0.1 according to paper
# x is new data, G_z is closely regenerated data
def Anomaly_score(x, G_z, Lambda=0.1):
    _, x_feature = discriminator(x)
    _, G_z_feature = discriminator(G_z)
    residual_loss = torch.sum(torch.abs(x - G_z))
    discrimination_loss = torch.sum(torch.abs(x_feature - G_z_feature))
    total_loss = (1 - Lambda) * residual_loss + Lambda * discrimination_loss
    return total_loss


test_size = 2
test_data_mnist = torch.rand(test_size, 1, 8, 8) * 2 - 1

# restore the trained models for testing
trained_g, trained_d = generator, discriminator
generator, discriminator = Generator(), Discriminator()
generator.load_state_dict(trained_g.state_dict())
discriminator.load_state_dict(trained_d.state_dict())

z = init.normal_(torch.zeros(test_size, 10), mean=0, std=0.1).requires_grad_(True)
z_optimizer = torch.optim.Adam([z], lr=1e-4)

for i in range(6):
    gen_fake = generator(z)
    loss = Anomaly_score(test_data_mnist, gen_fake, Lambda=0.01)
    loss.backward()
    z_optimizer.step()

    if i % 100 == 0:
        print(loss.data)
