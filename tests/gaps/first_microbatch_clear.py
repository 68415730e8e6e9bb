"""guided-diffusion's classifier_train.py, reduced: the clear runs on the first micro-batch only
(`if i == 0`), once per step, which is correct. The analysis takes `i == 0` for any branch, so
a path seems to skip the clear and to clear at another frequency than the step."""
import torch


def train(model, data, iterations):
    opt = torch.optim.AdamW(model.parameters())

    def forward_backward(loader):
        batch = next(loader)
        for i, sub in enumerate(batch.split(2)):
            loss = model(sub).mean()
            if i == 0:
                opt.zero_grad()
            loss.backward()

    for step in range(iterations):
        forward_backward(data)  # gap: ZG003
        opt.step()  # gap: ZG004


if __name__ == "__main__":
    torch.manual_seed(0)
    train(torch.nn.Linear(3, 1), iter([torch.randn(4, 3) for _ in range(3)]), 3)
