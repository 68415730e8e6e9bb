# source: https://github.com/skorch-dev/skorch/issues/636
# pattern: the skorch fix: the closure passed to optimizer_.step clears first (zero_grad inside step_fn, none after the step), so every LBFGS evaluation of the loss computes a fresh gradient
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: clean (each closure check reads only that evaluation's backward)
import torch
import torch.nn as nn
import torch.nn.functional as F


class FirstStepAccumulator:
    """Stores and returns the first step of an optimizer call (LBFGS makes several)."""

    def __init__(self):
        self.step = None

    def store_step(self, step):
        if self.step is None:
            self.step = step

    def get_step(self):
        return self.step


class History(list):
    def new_epoch(self):
        self.append({'batches': []})

    def record_batch(self, key, value):
        self[-1]['batches'][-1][key] = value

    def new_batch(self):
        self[-1]['batches'].append({})

    def record(self, key, value):
        self[-1][key] = value


class NeuralNet:
    def __init__(self, module, criterion=nn.NLLLoss, optimizer=torch.optim.SGD, lr=0.01,
                 max_epochs=3, batch_size=16, **kwargs):
        self.module = module
        self.criterion = criterion
        self.optimizer = optimizer
        self.lr = lr
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.kwargs = kwargs

    def get_params_for(self, prefix):
        prefix = prefix + '__'
        return {k[len(prefix):]: v for k, v in self.kwargs.items() if k.startswith(prefix)}

    def initialize_module(self):
        self.module_ = self.module(**self.get_params_for('module'))

    def initialize_criterion(self):
        self.criterion_ = self.criterion()

    def initialize_optimizer(self):
        kwargs = self.get_params_for('optimizer')
        kwargs['lr'] = self.lr
        self.optimizer_ = self.optimizer(self.module_.parameters(), **kwargs)

    def initialize(self):
        self.initialize_module()
        self.initialize_criterion()
        self.initialize_optimizer()
        self.history = History()
        return self

    def notify(self, method_name, **cb_kwargs):
        pass

    def infer(self, x, **fit_params):
        return self.module_(x, **fit_params)

    def get_loss(self, y_pred, y_true, X=None, training=False):
        return self.criterion_(y_pred, y_true)

    def get_iterator(self, dataset, training=False):
        X, y = dataset
        batch_size = len(X) if self.batch_size == -1 else self.batch_size
        for i in range(0, len(X), batch_size):
            yield X[i:i + batch_size], y[i:i + batch_size]

    def validation_step(self, Xi, yi, **fit_params):
        self.module_.eval()
        with torch.no_grad():
            y_pred = self.infer(Xi, **fit_params)
            loss = self.get_loss(y_pred, yi, X=Xi, training=False)
        return {'loss': loss, 'y_pred': y_pred}

    def train_step_single(self, Xi, yi, **fit_params):
        """Compute y_pred, loss value, and update net's gradients."""
        self.module_.train()
        y_pred = self.infer(Xi, **fit_params)
        loss = self.get_loss(y_pred, yi, X=Xi, training=True)
        loss.backward()
        self.notify('on_grad_computed', named_parameters=self.module_.named_parameters(), X=Xi, y=yi)
        return {'loss': loss, 'y_pred': y_pred}

    def get_train_step_accumulator(self):
        return FirstStepAccumulator()

    def train_step(self, Xi, yi, **fit_params):
        """Pass a loss closure to the optimizer: one optimization step."""
        step_accumulator = self.get_train_step_accumulator()
        def step_fn():
            self.optimizer_.zero_grad()
            step = self.train_step_single(Xi, yi, **fit_params)
            step_accumulator.store_step(step)
            return step['loss']
        self.optimizer_.step(step_fn)
        return step_accumulator.get_step()

    def run_single_epoch(self, dataset, training, prefix, step_fn, **fit_params):
        batch_count = 0
        for Xi, yi in self.get_iterator(dataset, training=training):
            self.history.new_batch()
            self.notify('on_batch_begin', X=Xi, y=yi, training=training)
            step = step_fn(Xi, yi, **fit_params)
            self.history.record_batch(prefix + '_loss', step['loss'].item())
            self.notify('on_batch_end', X=Xi, y=yi, training=training, **step)
            batch_count += 1
        self.history.record(prefix + '_batch_count', batch_count)

    def get_split_datasets(self, X, y):
        n_train = int(0.8 * len(X))
        return (X[:n_train], y[:n_train]), (X[n_train:], y[n_train:])

    def fit_loop(self, X, y=None, epochs=None, **fit_params):
        epochs = epochs if epochs is not None else self.max_epochs
        dataset_train, dataset_valid = self.get_split_datasets(X, y)
        for _ in range(epochs):
            self.history.new_epoch()
            self.notify('on_epoch_begin')
            self.run_single_epoch(dataset_train, training=True, prefix='train',
                                  step_fn=self.train_step, **fit_params)
            if dataset_valid is not None:
                self.run_single_epoch(dataset_valid, training=False, prefix='valid',
                                      step_fn=self.validation_step, **fit_params)
            self.notify('on_epoch_end')
        return self

    def fit(self, X, y=None, **fit_params):
        self.initialize()
        return self.fit_loop(X, y, **fit_params)


class ClassifierModule(nn.Module):
    def __init__(self, num_units=8, nonlin=F.relu):
        super(ClassifierModule, self).__init__()
        self.dense0 = nn.Linear(6, num_units)
        self.nonlin = nonlin
        self.output = nn.Linear(num_units, 2)

    def forward(self, X):
        return F.log_softmax(self.output(self.nonlin(self.dense0(X))), dim=-1)


if __name__ == '__main__':
    torch.manual_seed(0)
    X = torch.randn(40, 6)
    y = (X[:, 0] > 0).long()
    net = NeuralNet(ClassifierModule, optimizer=torch.optim.LBFGS, lr=1.0, batch_size=-1,
                    max_epochs=2, optimizer__max_iter=4)
    net.fit(X, y)
    print([epoch['batches'][0]['train_loss'] for epoch in net.history])
