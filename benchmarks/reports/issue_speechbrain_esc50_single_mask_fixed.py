# source: https://github.com/speechbrain/speechbrain/commit/8f0b0c91bf5a382f97a7033a971765192a9fc049
# pattern: ESC50 interpretation recipe (train_single_mask.py) after the fix: each clip gets a fresh mask Parameter and Adam([mask]), and the EP loop now starts with opt.zero_grad() before scoring ft*relu(mask) and ft*relu(1-mask) with the pretrained embedding_model and classifier (speechbrain's Brain replaced by a small stand-in)
# case: trap
# expect: clean
# spread: single
# label: oracle.py: AGREE (clean)
from types import SimpleNamespace

import torch
import torch.nn as nn


class Brain:
    # stand-in for speechbrain.core.Brain: keeps modules, hparams and the optimizer class
    def __init__(self, modules=None, opt_class=None, hparams=None, run_opts=None, checkpointer=None):
        self.modules = SimpleNamespace(**modules)
        self.opt_class = opt_class
        self.hparams = SimpleNamespace(**hparams)
        self.device = "cpu"
        self.checkpointer = checkpointer


class InterpreterESC50Brain(Brain):
    """Class for sound class embedding training"""

    def preprocess(self, wavs):
        """Pre-process wavs."""
        X_stft = self.modules.compute_stft(wavs)
        X_stft_power = X_stft.pow(2).sum(-1) ** self.hparams.spec_mag_power
        X_stft_logpower = torch.log1p(X_stft_power)
        return X_stft_logpower, X_stft, X_stft_power


class STFT(nn.Module):
    def __init__(self, n_fft=16, hop_length=8):
        super().__init__()
        self.n_fft = n_fft
        self.hop_length = hop_length

    def forward(self, wavs):
        spec = torch.stft(wavs, self.n_fft, self.hop_length, window=torch.hann_window(self.n_fft), return_complex=True)
        return torch.view_as_real(spec).transpose(1, 2)  # [B, T, F, 2]


class Cnn14(nn.Module):
    # stand-in for the pretrained CNN14 embedding model
    def __init__(self, emb_dim=8):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, emb_dim, 3, padding=1))

    def forward(self, x):
        return self.conv(x.unsqueeze(1))


class Classifier(nn.Module):
    def __init__(self, emb_dim=8, n_classes=5):
        super().__init__()
        self.out = nn.Linear(emb_dim, n_classes)

    def forward(self, h):
        return self.out(h).unsqueeze(1)


def dataio_prep(hparams):
    train = [{"sig": torch.randn(64)} for _ in range(2)]
    return {"train": train}, None


if __name__ == "__main__":
    torch.manual_seed(0)
    hparams = {
        "modules": {"compute_stft": STFT()},
        "opt_class": lambda params: torch.optim.Adam(params, lr=2e-4),
        "spec_mag_power": 0.5,
        "embedding_model": Cnn14(),
        "classifier": Classifier(),
        "device": "cpu",
        "checkpointer": None,
    }
    datasets, label_encoder = dataio_prep(hparams)

    Interpreter_brain = InterpreterESC50Brain(
        modules=hparams["modules"],
        opt_class=hparams["opt_class"],
        hparams=hparams,
        run_opts={},
        checkpointer=hparams["checkpointer"],
    )

    hparams["embedding_model"].to(hparams["device"])
    hparams["classifier"].to(hparams["device"])
    hparams["embedding_model"].eval()

    embedding_model = hparams['embedding_model']
    classifier = hparams['classifier']

    EP = 4
    for i, dt in enumerate(datasets['train']):
        ft, _, _ = Interpreter_brain.preprocess(dt['sig'].unsqueeze(0))
        mask = torch.nn.Parameter(torch.ones(ft.shape) * 0.5, requires_grad=True)
        opt = torch.optim.Adam([mask], lr=1e-3)

        for e in range(EP):
            opt.zero_grad()
            h = embedding_model.forward(ft)
            h = h.mean((-1, -2))
            xhat = classifier.forward(h)
            argmax = xhat.argmax(-1)

            h = embedding_model.forward(ft * torch.relu(mask))
            h = h.mean((-1, -2))
            xhat = classifier.forward(h).squeeze()

            h2 = embedding_model.forward(ft * torch.relu(1 - mask))
            h2 = h2.mean((-1, -2))
            xhat2 = classifier.forward(h2).squeeze()

            loss = - xhat[argmax] + xhat2[argmax] + mask.abs().mean()

            loss.backward()

            opt.step()

            print(f'loss {loss.item()}, ep {e}')
