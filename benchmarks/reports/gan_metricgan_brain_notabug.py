# source: https://github.com/speechbrain/speechbrain/issues/1492
# pattern: MetricGAN+ recipe (a stand-in of speechbrain's Brain.fit loop is in the script): in the discriminator sub-stages the enhanced spectrogram is not detached, so the D_enh loss writes into the generator, and the generator loss runs through the discriminator; not a bug (the reporter withdrew it): fit_batch clears g_optimizer right before the generator's backward and d_optimizer right before each discriminator backward
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: optimizer #0 (g_optimizer) applies only the generator-stage backward (L178), one per step; optimizer #1 (d_optimizer) only one discriminator loss per step (L161, L168); oracle.py: AGREE (clean)
from enum import Enum, auto
from types import SimpleNamespace

import torch
import torch.nn as nn


# ---- tiny stand-in of speechbrain's Brain, Stage and hparams ----
class Stage(Enum):
    TRAIN = auto()
    VALID = auto()
    TEST = auto()


class Brain:
    def __init__(self, modules, hparams):
        self.modules = nn.ModuleDict(modules)
        self.hparams = SimpleNamespace(**hparams)
        self.device = 'cpu'
        self.checkpointer = None

    def on_fit_start(self):
        self.init_optimizers()

    def make_dataloader(self, dataset, stage, **loader_kwargs):
        return list(dataset)

    def check_gradients(self, loss):
        return bool(torch.isfinite(loss))

    def fit(self, epoch_counter, train_set, train_loader_kwargs=None):
        self.on_fit_start()
        for epoch in epoch_counter:
            self.on_stage_start(Stage.TRAIN, epoch)
            avg_train_loss = 0.0
            loader = self.make_dataloader(train_set, Stage.TRAIN, **(train_loader_kwargs or {}))
            for step, batch in enumerate(loader, 1):
                loss = self.fit_batch(batch)
                avg_train_loss += (float(loss) - avg_train_loss) / step
            self.on_stage_end(Stage.TRAIN, avg_train_loss, epoch)
# ---- end of stand-in ----


class SubStage(Enum):
    """For keeping track of training stage progress"""
    GENERATOR = auto()
    CURRENT = auto()
    HISTORICAL = auto()


def pesq_eval(pred_wav, target_wav):
    """Stand-in for the normalized PESQ: any score computed outside autograd"""
    return 1.0 / (1.0 + ((pred_wav - target_wav) ** 2).mean().item())


class MetricGanBrain(Brain):
    def compute_feats(self, wavs):
        feats = self.hparams.compute_STFT(wavs)
        return torch.log1p(feats.abs())

    def compute_forward(self, batch, stage):
        if self.sub_stage == SubStage.HISTORICAL:
            predict_wav, lens = batch.enh_sig
        else:
            noisy_wav, lens = batch.noisy_sig
            noisy_spec = self.compute_feats(noisy_wav)
            # mask with "signal approximation (SA)"
            mask = self.modules.generator(noisy_spec)
            mask = mask.clamp(min=self.hparams.min_mask)
            predict_spec = torch.mul(mask, noisy_spec)
            predict_wav = self.hparams.resynth(torch.expm1(predict_spec), noisy_wav)
        return predict_wav

    def compute_objectives(self, predictions, batch, stage, optim_name=""):
        predict_wav = predictions
        predict_spec = self.compute_feats(predict_wav)
        clean_wav, lens = batch.clean_sig
        clean_spec = self.compute_feats(clean_wav)
        mse_cost = self.hparams.compute_cost(predict_spec, clean_spec)
        ids = self.compute_ids(batch.id, optim_name)

        # One is real, zero is fake
        if optim_name == "generator":
            target_score = torch.ones(self.batch_size, 1)
            est_score = self.est_score(predict_spec, clean_spec)
        # D Learns to estimate the scores of clean speech
        elif optim_name == "D_clean":
            target_score = torch.ones(self.batch_size, 1)
            est_score = self.est_score(clean_spec, clean_spec)
        # D Learns to estimate the scores of enhanced speech
        elif optim_name == "D_enh" and self.sub_stage == SubStage.CURRENT:
            target_score = self.score(ids, predict_wav, clean_wav, lens)
            est_score = self.est_score(predict_spec, clean_spec)
            self.write_wavs(batch.id, ids, predict_wav, clean_wav, target_score, lens)
        # D Relearns to estimate the scores of previous epochs
        elif optim_name == "D_enh" and self.sub_stage == SubStage.HISTORICAL:
            target_score = batch.score.unsqueeze(1).float()
            est_score = self.est_score(predict_spec, clean_spec)
        # D Learns to estimate the scores of noisy speech
        elif optim_name == "D_noisy":
            noisy_wav, _ = batch.noisy_sig
            noisy_spec = self.compute_feats(noisy_wav)
            target_score = self.score(ids, noisy_wav, clean_wav, lens)
            est_score = self.est_score(noisy_spec, clean_spec)
            self.save_noisy_scores(ids, target_score)

        if stage == Stage.TRAIN:
            adv_cost = self.hparams.compute_cost(est_score, target_score)
            if optim_name == "generator":
                adv_cost += self.hparams.mse_weight * mse_cost
                self.metrics["G"].append(adv_cost.detach())
            else:
                self.metrics["D"].append(adv_cost.detach())
        return adv_cost

    def compute_ids(self, batch_id, optim_name):
        if optim_name == "D_enh":
            return [f"{uid}@{self.epoch}" for uid in batch_id]
        return batch_id

    def save_noisy_scores(self, batch_id, scores):
        for i, score in zip(batch_id, scores):
            self.noisy_scores[i] = score

    def score(self, batch_id, deg_wav, ref_wav, lens):
        final_score = []
        for i, d in enumerate(batch_id):
            if d in self.historical_set:
                final_score.append([self.historical_set[d]["score"]])
            elif d in self.noisy_scores:
                final_score.append([float(self.noisy_scores[d])])
            else:
                final_score.append([pesq_eval(deg_wav[i].detach(), ref_wav[i].detach())])
        return torch.tensor(final_score)

    def est_score(self, deg_spec, ref_spec):
        combined_spec = torch.cat([deg_spec.unsqueeze(1), ref_spec.unsqueeze(1)], 1)
        return self.modules.discriminator(combined_spec)

    def write_wavs(self, clean_id, batch_id, wavs, clean_wavs, score, lens):
        record = {}
        for i, (cleanid, name) in enumerate(zip(clean_id, batch_id)):
            record[name] = {"enh_wav": wavs[i].detach().clone(), "score": float(score[i][0]),
                            "clean_wav": clean_wavs[i].clone(), "id": cleanid}
        self.historical_set.update(record)

    def fit_batch(self, batch):
        "Compute gradients and update either D or G based on sub-stage."
        predictions = self.compute_forward(batch, Stage.TRAIN)
        loss_tracker = 0
        if self.sub_stage == SubStage.CURRENT:
            for mode in ["clean", "enh", "noisy"]:
                loss = self.compute_objectives(predictions, batch, Stage.TRAIN, f"D_{mode}")
                self.d_optimizer.zero_grad()
                loss.backward()
                if self.check_gradients(loss):
                    self.d_optimizer.step()
                loss_tracker += loss.detach() / 3
        elif self.sub_stage == SubStage.HISTORICAL:
            loss = self.compute_objectives(predictions, batch, Stage.TRAIN, "D_enh")
            self.d_optimizer.zero_grad()
            loss.backward()
            if self.check_gradients(loss):
                self.d_optimizer.step()
            loss_tracker += loss.detach()
        elif self.sub_stage == SubStage.GENERATOR:
            for name, param in self.modules.generator.named_parameters():
                if "Learnable_sigmoid" in name:
                    param.data = torch.clamp(param, max=3.5)
            loss = self.compute_objectives(predictions, batch, Stage.TRAIN, "generator")
            self.g_optimizer.zero_grad()
            loss.backward()
            if self.check_gradients(loss):
                self.g_optimizer.step()
            loss_tracker += loss.detach()
        return loss_tracker

    def on_stage_start(self, stage, epoch=None):
        self.metrics = {"G": [], "D": []}
        if stage == Stage.TRAIN:
            # Train discriminator before we start generator training
            if self.sub_stage == SubStage.GENERATOR:
                self.epoch = epoch
                self.train_discriminator()
                self.sub_stage = SubStage.GENERATOR

    def train_discriminator(self):
        """A total of 3 data passes to update discriminator."""
        self.sub_stage = SubStage.CURRENT
        self.fit(range(1), self.train_set, train_loader_kwargs=self.hparams.dataloader_options)
        if self.historical_set:
            self.sub_stage = SubStage.HISTORICAL
            self.fit(range(1), self.historical_set, train_loader_kwargs=self.hparams.dataloader_options)
        self.sub_stage = SubStage.CURRENT
        self.fit(range(1), self.train_set, train_loader_kwargs=self.hparams.dataloader_options)

    def on_stage_end(self, stage, stage_loss, epoch=None):
        if self.sub_stage != SubStage.GENERATOR:
            return
        if stage == Stage.TRAIN:
            self.train_loss = stage_loss

    def make_dataloader(self, dataset, stage, **loader_kwargs):
        "Override dataloader to insert the historical set"
        if stage == Stage.TRAIN and self.sub_stage == SubStage.HISTORICAL:
            items = list(dataset.values())[: self.hparams.history_samples]
            return [make_enh_batch(items[i:i + self.batch_size]) for i in range(0, len(items), self.batch_size)]
        return super().make_dataloader(dataset, stage, **loader_kwargs)

    def on_fit_start(self):
        "Override to prevent this from running for D training"
        if self.sub_stage == SubStage.GENERATOR:
            super().on_fit_start()

    def init_optimizers(self):
        "Initializes the generator and discriminator optimizers"
        self.g_optimizer = self.hparams.g_opt_class(self.modules.generator.parameters())
        self.d_optimizer = self.hparams.d_opt_class(self.modules.discriminator.parameters())


def make_enh_batch(items):
    enh = torch.stack([it["enh_wav"] for it in items])
    clean = torch.stack([it["clean_wav"] for it in items])
    lens = torch.ones(len(items))
    return SimpleNamespace(id=[it["id"] for it in items], enh_sig=(enh, lens), clean_sig=(clean, lens),
                           score=torch.tensor([it["score"] for it in items]))


def dataio_prep(n_batches, batch_size, n_samples):
    batches = []
    for b in range(n_batches):
        ids = [f"utt{b}_{i}" for i in range(batch_size)]
        clean = torch.randn(batch_size, n_samples)
        noisy = clean + 0.3 * torch.randn(batch_size, n_samples)
        lens = torch.ones(batch_size)
        batches.append(SimpleNamespace(id=ids, noisy_sig=(noisy, lens), clean_sig=(clean, lens)))
    return batches


if __name__ == "__main__":
    torch.manual_seed(0)
    n_bins = 6
    generator = nn.Sequential(nn.Linear(n_bins, 8), nn.LeakyReLU(0.3), nn.Linear(8, n_bins), nn.Sigmoid())
    discriminator = nn.Sequential(nn.Flatten(), nn.Linear(2 * n_bins, 8), nn.LeakyReLU(0.3), nn.Linear(8, 1))
    hparams = dict(
        compute_STFT=lambda wav: wav,
        resynth=lambda spec, noisy: spec,
        compute_cost=lambda a, b: ((a - b) ** 2).mean(),
        min_mask=0.05, mse_weight=0.0, history_samples=4, dataloader_options={},
        g_opt_class=lambda params: torch.optim.Adam(params, lr=5e-4),
        d_opt_class=lambda params: torch.optim.Adam(params, lr=5e-4),
    )
    se_brain = MetricGanBrain(modules={"generator": generator, "discriminator": discriminator}, hparams=hparams)
    se_brain.train_set = dataio_prep(n_batches=3, batch_size=2, n_samples=n_bins)
    se_brain.historical_set = {}
    se_brain.noisy_scores = {}
    se_brain.batch_size = 2
    se_brain.sub_stage = SubStage.GENERATOR
    se_brain.fit(epoch_counter=range(2), train_set=se_brain.train_set)
