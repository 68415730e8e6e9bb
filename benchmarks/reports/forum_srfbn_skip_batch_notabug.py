# source: https://github.com/Paper99/SRFBN_CVPR19/issues/2
# pattern: SRFBN solver: train.py calls solver.feed_data(batch) then solver.train_step() per batch; train_step clears first, backpropagates the curriculum loss of every split sub-batch (accumulated on purpose), and steps only when the batch loss stays under skip_threshold * last_epoch_loss; a thread about exploding loss and "Skip this batch!" warnings: a skipped batch's gradients are dropped by the next call's clear, never applied
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean (every step applies exactly the split sub-batches of its own call)
import torch
import torch.nn as nn
import torch.optim as optim


class FeedbackBlock(nn.Module):
    def __init__(self, num_features):
        super(FeedbackBlock, self).__init__()
        self.compress_in = nn.Conv2d(2 * num_features, num_features, 1)
        self.body = nn.Conv2d(num_features, num_features, 3, padding=1)
        self.should_reset = True
        self.last_hidden = None

    def forward(self, x):
        if self.should_reset:
            self.last_hidden = torch.zeros_like(x)
            self.last_hidden.copy_(x)
            self.should_reset = False
        x = torch.cat((x, self.last_hidden), dim=1)
        x = torch.relu(self.compress_in(x))
        output = torch.relu(self.body(x))
        self.last_hidden = output
        return output

    def reset_state(self):
        self.should_reset = True


class SRFBN(nn.Module):
    def __init__(self, in_channels, out_channels, num_features, num_steps, upscale_factor):
        super(SRFBN, self).__init__()
        self.num_steps = num_steps
        self.upscale_factor = upscale_factor
        self.conv_in = nn.Conv2d(in_channels, num_features, 3, padding=1)
        self.block = FeedbackBlock(num_features)
        self.out = nn.Conv2d(num_features, out_channels * upscale_factor ** 2, 3, padding=1)
        self.shuffle = nn.PixelShuffle(upscale_factor)

    def forward(self, x):
        self._reset_state()
        inter_res = nn.functional.interpolate(x, scale_factor=self.upscale_factor, mode='bilinear',
                                              align_corners=False)
        x = torch.relu(self.conv_in(x))
        outs = []
        for _ in range(self.num_steps):
            h = self.block(x)
            outs.append(torch.add(inter_res, self.shuffle(self.out(h))))
        return outs

    def _reset_state(self):
        self.block.reset_state()


def create_model(opt):
    n = opt['networks']
    return SRFBN(in_channels=n['in_channels'], out_channels=n['out_channels'], num_features=n['num_features'],
                 num_steps=n['num_steps'], upscale_factor=n['scale'])


class BaseSolver(object):
    def __init__(self, opt):
        self.opt = opt
        self.scale = opt['scale']
        self.is_train = opt['is_train']
        self.use_cl = True if opt['use_cl'] else False
        self.split_batch = opt['solver']['split_batch']
        self.skip_threshold = opt['solver']['skip_threshold']
        self.last_epoch_loss = 1e8


class SRSolver(BaseSolver):
    def __init__(self, opt):
        super(SRSolver, self).__init__(opt)
        self.train_opt = opt['solver']
        self.LR = torch.Tensor()
        self.HR = torch.Tensor()
        self.model = create_model(opt)
        if self.is_train:
            self.model.train()
            if self.use_cl:
                self.cl_weights = self.opt['solver']['cl_weights']
            loss_type = self.train_opt['loss_type']
            if loss_type == 'l1':
                self.criterion_pix = nn.L1Loss()
            else:
                self.criterion_pix = nn.MSELoss()
            weight_decay = self.train_opt['weight_decay'] if self.train_opt['weight_decay'] else 0
            self.optimizer = optim.Adam(self.model.parameters(), lr=self.train_opt['learning_rate'],
                                        weight_decay=weight_decay)
            self.scheduler = optim.lr_scheduler.MultiStepLR(self.optimizer, self.train_opt['lr_steps'],
                                                            self.train_opt['lr_gamma'])

    def feed_data(self, batch, need_HR=True):
        input = batch['LR']
        self.LR.resize_(input.size()).copy_(input)
        if need_HR:
            target = batch['HR']
            self.HR.resize_(target.size()).copy_(target)

    def train_step(self):
        self.model.train()
        self.optimizer.zero_grad()

        loss_batch = 0.0
        sub_batch_size = int(self.LR.size(0) / self.split_batch)
        for i in range(self.split_batch):
            loss_sbatch = 0.0
            split_LR = self.LR.narrow(0, i * sub_batch_size, sub_batch_size)
            split_HR = self.HR.narrow(0, i * sub_batch_size, sub_batch_size)
            if self.use_cl:
                outputs = self.model(split_LR)
                loss_steps = [self.criterion_pix(sr, split_HR) for sr in outputs]
                for step in range(len(loss_steps)):
                    loss_sbatch += self.cl_weights[step] * loss_steps[step]
            else:
                output = self.model(split_LR)
                loss_sbatch = self.criterion_pix(output, split_HR)

            loss_sbatch /= self.split_batch
            loss_sbatch.backward()
            loss_batch += (loss_sbatch.item())

        # for stable training
        if loss_batch < self.skip_threshold * self.last_epoch_loss:
            self.optimizer.step()
            self.last_epoch_loss = loss_batch
        else:
            print('[Warning] Skip this batch! (Loss: {})'.format(loss_batch))

        self.model.eval()
        return loss_batch

    def update_learning_rate(self, epoch):
        self.scheduler.step()


opt = {
    'scale': 2, 'is_train': True, 'use_cl': True,
    'networks': {'in_channels': 3, 'out_channels': 3, 'num_features': 4, 'num_steps': 3, 'scale': 2},
    'solver': {'split_batch': 2, 'skip_threshold': 3, 'cl_weights': [1.0, 1.0, 1.0], 'loss_type': 'l1',
               'weight_decay': 0, 'learning_rate': 1e-4, 'lr_steps': [2], 'lr_gamma': 0.5, 'num_epochs': 2},
}


def main():
    torch.manual_seed(0)
    solver = SRSolver(opt)
    train_loader = [{'LR': torch.rand(4, 3, 6, 6), 'HR': torch.rand(4, 3, 12, 12)} for _ in range(3)]
    NUM_EPOCH = int(opt['solver']['num_epochs'])
    for epoch in range(1, NUM_EPOCH + 1):
        train_loss_list = []
        for iter, batch in enumerate(train_loader):
            solver.feed_data(batch)
            iter_loss = solver.train_step()
            batch_size = batch['LR'].size(0)
            train_loss_list.append(iter_loss * batch_size)
        solver.update_learning_rate(epoch)
        print('Epoch: [%d/%d]   Avg Train Loss: %.6f' % (epoch, NUM_EPOCH, sum(train_loss_list) / 12))


if __name__ == '__main__':
    main()
