# source: https://github.com/automl/ConfigurableOptimizer/pull/173
# pattern: DARTS trainer with a weight optimizer over model_weight_parameters() and an arch optimizer over arch_parameters, both built by _get_optimizer(); the arch optimizer is cleared only before the base loss and at the end of a non-warm epoch's iteration, so the base loss of the last warm-up iteration stays in the alphas and the first arch step of the search applies it
# case: bug
# expect: ZG006@133-137
# spread: multi
# label: contributions.py: optimizer #1 (arch Adam) applies the base_loss backward (the weight optimizer's loss) at the first step after the warm-up epochs
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class AverageMeter:
    def __init__(self):
        self.sum, self.count, self.avg = 0.0, 0, 0.0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class MixedOp(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self._ops = nn.ModuleList([nn.Linear(dim, dim), nn.Sequential(nn.Linear(dim, dim), nn.ReLU()), nn.Identity()])

    def forward(self, x, weights):
        return sum(w * op(x) for w, op in zip(weights, self._ops))


class SearchSpace(nn.Module):
    def __init__(self, dim=8, n_cells=2, n_classes=3):
        super().__init__()
        self.stem = nn.Linear(6, dim)
        self.cells = nn.ModuleList([MixedOp(dim) for _ in range(n_cells)])
        self.classifier = nn.Linear(dim, n_classes)
        self.alphas_normal = nn.Parameter(1e-3 * torch.randn(n_cells, 3))

    @property
    def arch_parameters(self):
        return [self.alphas_normal]

    def model_weight_parameters(self):
        return [p for name, p in self.named_parameters() if "alphas" not in name]

    def get_arch_parameters_as_dict(self):
        return {"alphas_normal": self.alphas_normal.detach().clone()}

    def forward(self, x):
        h = self.stem(x)
        weights = F.softmax(self.alphas_normal, dim=-1)
        for i, cell in enumerate(self.cells):
            h = cell(h, weights[i])
        logits = self.classifier(h)
        return h, logits


class PartialConnector:
    def __init__(self, num_warm_epoch):
        self.num_warm_epoch = num_warm_epoch


class SearchSpaceHandler:
    def __init__(self, partial_connector=None, reg_weight=0.0):
        self.partial_connector = partial_connector
        self.reg_weight = reg_weight
        self.lora_configs = None

    def adapt_search_space(self, model):
        pass

    def add_reg_terms(self, model, loss):
        if self.reg_weight:
            loss = loss + self.reg_weight * sum(a.pow(2).sum() for a in model.arch_parameters)
        return loss

    def perturb_parameter(self, model):
        pass


class ConfigurableTrainer:
    def __init__(self, model, data, model_optimizer, arch_optimizer, criterion, epochs, print_freq=10):
        self.model = model
        self.data = data
        self.model_optimizer = model_optimizer
        self.arch_optimizer = arch_optimizer
        self.criterion = criterion
        self.epochs = epochs
        self.start_epoch = 0
        self.print_freq = print_freq

    def train(self, search_space_handler):
        search_space_handler.adapt_search_space(self.model)
        network = self.model
        criterion = self.criterion
        train_loader, val_loader = self.data

        is_warm_epoch = False
        warm_epochs = 0
        if search_space_handler.partial_connector:
            warm_epochs = search_space_handler.partial_connector.num_warm_epoch
            is_warm_epoch = True

        for epoch in range(self.start_epoch + 1, self.epochs + 1):
            if epoch == warm_epochs + 1:
                is_warm_epoch = False

            base_metrics, arch_metrics = self._train_epoch(
                search_space_handler,
                train_loader,
                val_loader,
                network,
                criterion,
                self.model_optimizer,
                self.arch_optimizer,
                self.print_freq,
                is_warm_epoch=is_warm_epoch,
            )
            print(epoch, base_metrics, arch_metrics, network.get_arch_parameters_as_dict()["alphas_normal"][0])

    def _train_epoch(self, search_space_handler, train_loader, valid_loader, network, criterion,
                     w_optimizer, arch_optimizer, print_freq, is_warm_epoch=False):
        base_losses, arch_losses = AverageMeter(), AverageMeter()
        network.train()
        end = time.time()

        for step, (base_inputs, base_targets) in enumerate(train_loader):
            arch_inputs, arch_targets = next(iter(valid_loader))

            if not is_warm_epoch:
                _, logits = network(arch_inputs)
                arch_loss = criterion(logits, arch_targets)
                arch_loss = search_space_handler.add_reg_terms(network, arch_loss)
                arch_loss.backward()
                arch_optimizer.step()

                search_space_handler.perturb_parameter(network)
                arch_losses.update(arch_loss.item(), arch_inputs.size(0))

            # update the model weights
            w_optimizer.zero_grad()
            arch_optimizer.zero_grad()

            _, logits = network(base_inputs)
            base_loss = criterion(logits, base_targets)
            base_loss = search_space_handler.add_reg_terms(network, base_loss)
            base_loss.backward()

            torch.nn.utils.clip_grad_norm_(network.model_weight_parameters(), 5)

            w_optimizer.step()

            w_optimizer.zero_grad()
            if not is_warm_epoch:
                arch_optimizer.zero_grad()

            base_losses.update(base_loss.item(), base_inputs.size(0))
            end = time.time()

        return base_losses.avg, arch_losses.avg


class Experiment:
    def __init__(self, search_space):
        self.search_space = search_space

    def _get_optimizer(self, optim_str):
        if optim_str == "adam":
            return torch.optim.Adam
        elif optim_str == "sgd":
            return torch.optim.SGD
        if optim_str == "asgd":
            return torch.optim.ASGD
        return None

    def run_with_trainer(self, trainer_arguments):
        torch.manual_seed(0)
        train_loader = [(torch.randn(5, 6), torch.randint(0, 3, (5,))) for _ in range(4)]
        valid_loader = [(torch.randn(5, 6), torch.randint(0, 3, (5,))) for _ in range(4)]
        model = self.search_space

        w_optimizer = self._get_optimizer(trainer_arguments["optim"])(
            model.model_weight_parameters(),
            trainer_arguments["lr"],
            momentum=0.9,
        )
        arch_optimizer = self._get_optimizer(trainer_arguments["arch_optim"])(
            model.arch_parameters,
            lr=trainer_arguments["arch_lr"],
        )

        trainer = ConfigurableTrainer(
            model=model,
            data=(train_loader, valid_loader),
            model_optimizer=w_optimizer,
            arch_optimizer=arch_optimizer,
            criterion=nn.CrossEntropyLoss(),
            epochs=trainer_arguments["epochs"],
        )
        handler = SearchSpaceHandler(partial_connector=PartialConnector(num_warm_epoch=1))
        trainer.train(handler)


if __name__ == "__main__":
    Experiment(SearchSpace()).run_with_trainer(
        {"optim": "sgd", "lr": 0.025, "arch_optim": "adam", "arch_lr": 3e-4, "epochs": 3}
    )
