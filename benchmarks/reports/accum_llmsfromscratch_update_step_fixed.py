# source: https://github.com/rasbt/LLMs-from-scratch/issues/299
# pattern: the fix: train_classifier_simple (loss from the calc_loss_batch helper, the GPT's last-token logits) backpropagates every batch and steps and clears together only when is_update_step, (batch_idx + 1) % accumulation_steps == 0 or the epoch's last batch, so no window crosses the epoch boundary
# case: trap
# expect: clean
# spread: single
# label: oracle.py: clean
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(123)


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.trf_blocks = nn.Sequential(nn.Linear(cfg["emb_dim"], cfg["emb_dim"]), nn.GELU())
        self.final_norm = nn.LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        batch_size, seq_len = in_idx.shape
        x = self.tok_emb(in_idx) + self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = self.trf_blocks(x)
        x = self.final_norm(x)
        return self.out_head(x)


def calc_loss_batch(input_batch, target_batch, model, device,
                    trainable_token_pos=-1, ignore_index=-100):
    input_batch, target_batch = input_batch.to(device), target_batch.to(device)
    logits = model(input_batch)[:, trainable_token_pos, :]  # logits of the last output token
    loss = torch.nn.functional.cross_entropy(logits, target_batch, ignore_index=ignore_index)
    return loss


def calc_loss_loader(data_loader, model, device, num_batches=None,
                     trainable_token_pos=-1, ignore_index=-100):
    total_loss = 0.
    if len(data_loader) == 0:
        return float("nan")
    elif num_batches is None:
        num_batches = len(data_loader)
    else:
        num_batches = min(num_batches, len(data_loader))
    for i, (input_batch, target_batch) in enumerate(data_loader):
        if i < num_batches:
            loss = calc_loss_batch(input_batch, target_batch, model, device,
                                   trainable_token_pos=trainable_token_pos, ignore_index=ignore_index)
            total_loss += loss.item()
        else:
            break
    return total_loss / num_batches


def evaluate_model(model, train_loader, val_loader, device, eval_iter,
                   trainable_token_pos=-1, ignore_index=-100):
    model.eval()
    with torch.no_grad():
        train_loss = calc_loss_loader(train_loader, model, device, num_batches=eval_iter,
                                      trainable_token_pos=trainable_token_pos, ignore_index=ignore_index)
        val_loss = calc_loss_loader(val_loader, model, device, num_batches=eval_iter,
                                    trainable_token_pos=trainable_token_pos, ignore_index=ignore_index)
    model.train()
    return train_loss, val_loss


def train_classifier_simple(model, train_loader, val_loader, optimizer, device, num_epochs,
                            eval_freq, eval_iter, max_steps=None, trainable_token_pos=-1,
                            accumulation_steps=1, ignore_index=-100):
    train_losses, val_losses = [], []
    examples_seen, global_step = 0, -1

    for epoch in range(num_epochs):
        model.train()

        for batch_idx, (input_batch, target_batch) in enumerate(train_loader):
            loss = calc_loss_batch(input_batch, target_batch, model, device,
                                   trainable_token_pos=trainable_token_pos, ignore_index=ignore_index)

            # Use gradient accumulation if accumulation_steps > 1
            loss /= accumulation_steps

            loss.backward()  # calculate loss gradients

            is_update_step = ((batch_idx + 1) % accumulation_steps == 0) or ((batch_idx + 1) == len(train_loader))
            if is_update_step:
                optimizer.step()  # update model weights using loss gradients
                optimizer.zero_grad()  # reset loss gradients from previous batch iteration

            examples_seen += input_batch.shape[0]
            global_step += 1

            if global_step % eval_freq == 0:
                train_loss, val_loss = evaluate_model(
                    model, train_loader, val_loader, device, eval_iter,
                    trainable_token_pos=trainable_token_pos, ignore_index=ignore_index)
                train_losses.append(train_loss)
                val_losses.append(val_loss)

            if max_steps is not None and global_step > max_steps:
                break

        if max_steps is not None and global_step > max_steps:
            break

    return train_losses, val_losses, examples_seen


if __name__ == "__main__":
    cfg = {"vocab_size": 20, "context_length": 6, "emb_dim": 8}
    model = GPTModel(cfg)
    for param in model.parameters():
        param.requires_grad = False
    num_classes = 2
    model.out_head = nn.Linear(in_features=cfg["emb_dim"], out_features=num_classes)
    for param in model.trf_blocks[-2].parameters():
        param.requires_grad = True
    for param in model.final_norm.parameters():
        param.requires_grad = True

    train_ds = TensorDataset(torch.randint(0, cfg["vocab_size"], (5, 6)), torch.randint(0, num_classes, (5,)))
    val_ds = TensorDataset(torch.randint(0, cfg["vocab_size"], (2, 6)), torch.randint(0, num_classes, (2,)))
    train_loader = DataLoader(train_ds, batch_size=1, shuffle=True)
    val_loader = DataLoader(val_ds, batch_size=1)

    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.1)
    train_classifier_simple(model, train_loader, val_loader, optimizer, torch.device("cpu"),
                            num_epochs=3, eval_freq=4, eval_iter=1, accumulation_steps=2)
