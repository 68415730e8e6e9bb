# source: https://github.com/speechbrain/speechbrain/pull/1739
# pattern: Brain.fit_batch (called once per batch by Brain._fit_train) clears the optimizer at the top of its mixed-precision branch every batch while the scaler steps only when should_step (self.step % grad_accumulation_factor == 0): each window keeps only its last batch
# case: bug
# expect: ZG003@85-133
# spread: multi
# label: oracle.py: LOST (every batch but the window's last is wiped by the clear at the top of fit_batch)
import contextlib
import time
from enum import Enum, auto

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)


class Stage(Enum):
    TRAIN = auto()
    VALID = auto()
    TEST = auto()


class Brain:
    """A tiny stand-in of speechbrain.core.Brain, with its training methods as they were."""

    def __init__(self, modules=None, opt_class=None, hparams=None, run_opts=None):
        self.modules = torch.nn.ModuleDict(modules)
        self.opt_class = opt_class
        self.hparams = hparams or {}
        run_opts = run_opts or {}
        self.auto_mix_prec = run_opts.get("auto_mix_prec", False)
        self.grad_accumulation_factor = run_opts.get("grad_accumulation_factor", 1)
        self.max_grad_norm = run_opts.get("max_grad_norm", 5.0)
        self.nonfinite_patience = 3
        self.optimizer_step_limit = None
        self.checkpointer = None
        self.ckpt_interval_minutes = 0
        self.debug = False
        self.step = 0
        self.optimizer_step = 0
        self.avg_train_loss = 0.0
        if self.auto_mix_prec:
            self.scaler = torch.cuda.amp.GradScaler()

    def compute_forward(self, batch, stage):
        raise NotImplementedError

    def compute_objectives(self, predictions, batch, stage):
        raise NotImplementedError

    def init_optimizers(self):
        if self.opt_class is not None:
            self.optimizer = self.opt_class(self.modules.parameters())

    def on_fit_start(self):
        self.init_optimizers()

    def on_stage_start(self, stage, epoch=None):
        pass

    def on_stage_end(self, stage, stage_loss, epoch=None):
        pass

    @contextlib.contextmanager
    def no_sync(self, use=True):
        yield

    def check_gradients(self, loss):
        if not torch.isfinite(loss):
            self.nonfinite_count += 1
            if self.nonfinite_count > self.nonfinite_patience:
                raise ValueError("Loss is not finite and patience is exhausted.")
            return False
        if self.max_grad_norm > 0.0:
            torch.nn.utils.clip_grad_norm_(
                (p for p in self.modules.parameters()), self.max_grad_norm
            )
        return True

    def fit_batch(self, batch):
        """Fit one batch, override to do multiple updates."""
        should_step = self.step % self.grad_accumulation_factor == 0
        # Managing automatic mixed precision
        if self.auto_mix_prec:
            self.optimizer.zero_grad()
            with torch.cuda.amp.autocast():
                outputs = self.compute_forward(batch, Stage.TRAIN)
                loss = self.compute_objectives(outputs, batch, Stage.TRAIN)
            with self.no_sync(not should_step):
                self.scaler.scale(
                    loss / self.grad_accumulation_factor
                ).backward()
            if should_step:
                self.scaler.unscale_(self.optimizer)
                if self.check_gradients(loss):
                    self.scaler.step(self.optimizer)
                self.scaler.update()
                self.optimizer_step += 1
        else:
            outputs = self.compute_forward(batch, Stage.TRAIN)
            loss = self.compute_objectives(outputs, batch, Stage.TRAIN)
            with self.no_sync(not should_step):
                (loss / self.grad_accumulation_factor).backward()
            if should_step:
                if self.check_gradients(loss):
                    self.optimizer.step()
                self.optimizer.zero_grad()
                self.optimizer_step += 1

        self.on_fit_batch_end(batch, outputs, loss, should_step)
        return loss.detach().cpu()

    def on_fit_batch_end(self, batch, outputs, loss, should_step):
        pass

    def update_average(self, loss, avg_loss):
        if torch.isfinite(loss):
            avg_loss -= avg_loss / self.step
            avg_loss += float(loss) / self.step
        return avg_loss

    def _fit_train(self, train_set, epoch, enable):
        # Training stage
        self.on_stage_start(Stage.TRAIN, epoch)
        self.optimizer.zero_grad()
        self.modules.train()
        self.nonfinite_count = 0
        last_ckpt_time = time.time()
        for batch in train_set:
            if self._optimizer_step_limit_exceeded:
                break
            self.step += 1
            loss = self.fit_batch(batch)
            self.avg_train_loss = self.update_average(loss, self.avg_train_loss)
            if self.debug and self.step == self.debug_batches:
                break
            if (self.checkpointer is not None and self.ckpt_interval_minutes > 0
                    and time.time() - last_ckpt_time >= self.ckpt_interval_minutes * 60.0):
                last_ckpt_time = time.time()

        self.optimizer.zero_grad(set_to_none=True)  # flush gradients and save mem
        self.on_stage_end(Stage.TRAIN, self.avg_train_loss, epoch)
        self.avg_train_loss = 0.0
        self.step = 0

    def _fit_valid(self, valid_set, epoch, enable):
        if valid_set is not None:
            self.on_stage_start(Stage.VALID, epoch)
            self.modules.eval()
            avg_valid_loss = 0.0
            with torch.no_grad():
                for batch in valid_set:
                    self.step += 1
                    out = self.compute_forward(batch, stage=Stage.VALID)
                    loss = self.compute_objectives(out, batch, stage=Stage.VALID)
                    avg_valid_loss = self.update_average(loss.detach().cpu(), avg_valid_loss)
                self.step = 0
                self.on_stage_end(Stage.VALID, avg_valid_loss, epoch)

    def fit(self, epoch_counter, train_set, valid_set=None, progressbar=None):
        self.on_fit_start()
        enable = bool(progressbar)
        for epoch in epoch_counter:
            self._fit_train(train_set=train_set, epoch=epoch, enable=enable)
            self._fit_valid(valid_set=valid_set, epoch=epoch, enable=enable)

    @property
    def _optimizer_step_limit_exceeded(self):
        return (
            self.optimizer_step_limit is not None
            and self.optimizer_step >= self.optimizer_step_limit
        )


class SpeakerBrain(Brain):
    def compute_forward(self, batch, stage):
        feats, _ = batch
        embeddings = self.modules.embedding_model(feats)
        return self.modules.classifier(torch.relu(embeddings))

    def compute_objectives(self, predictions, batch, stage):
        _, labels = batch
        return torch.nn.functional.cross_entropy(predictions, labels)


if __name__ == "__main__":
    modules = {
        "embedding_model": torch.nn.Linear(6, 8),
        "classifier": torch.nn.Linear(8, 3),
    }
    train_data = TensorDataset(torch.randn(12, 6), torch.randint(0, 3, (12,)))
    valid_data = TensorDataset(torch.randn(4, 6), torch.randint(0, 3, (4,)))
    brain = SpeakerBrain(
        modules=modules,
        opt_class=lambda params: torch.optim.Adam(params, lr=1e-3),
        run_opts={"auto_mix_prec": True, "grad_accumulation_factor": 3},
    )
    brain.fit(
        range(1, 3),
        train_set=DataLoader(train_data, batch_size=2),
        valid_set=DataLoader(valid_data, batch_size=2),
    )
