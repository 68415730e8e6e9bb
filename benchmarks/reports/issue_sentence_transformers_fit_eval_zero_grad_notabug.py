# source: https://github.com/huggingface/sentence-transformers/issues/1530
# pattern: SentenceTransformer.fit(): one optimizer per training objective over its loss model's parameters (SoftmaxLoss adds a classifier, CosineSimilarityLoss shares the encoder), each objective's loss_model(features, labels) is backpropagated, stepped and followed by optimizer.zero_grad(); loss_model.zero_grad() appears only at the epoch start and after evaluation, asked "why zero_grad the loss model after evaluation and not in the training step?", answered that the gradient is reset after every optimizer step and the extra clear is only a precaution
# case: trap
# expect: clean
# spread: multi
# label: oracle.py: AGREE (clean: every step of both objectives applies only its own backward)
from typing import Iterable, Tuple

import torch
from torch import nn
from torch.utils.data import DataLoader


class Transformer(nn.Module):
    # stand-in for the HF encoder: token embeddings + one linear layer
    def __init__(self, vocab_size=12, dim=8):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.layer = nn.Linear(dim, dim)

    def forward(self, features):
        features['token_embeddings'] = torch.tanh(self.layer(self.embed(features['input_ids'])))
        return features


class Pooling(nn.Module):
    def forward(self, features):
        features['sentence_embedding'] = features['token_embeddings'].mean(1)
        return features


class SoftmaxLoss(nn.Module):
    def __init__(self, model, sentence_embedding_dimension, num_labels):
        super(SoftmaxLoss, self).__init__()
        self.model = model
        self.classifier = nn.Linear(3 * sentence_embedding_dimension, num_labels)
        self.loss_fct = nn.CrossEntropyLoss()

    def forward(self, sentence_features, labels):
        reps = [self.model(sentence_feature)['sentence_embedding'] for sentence_feature in sentence_features]
        rep_a, rep_b = reps
        features = torch.cat([rep_a, rep_b, torch.abs(rep_a - rep_b)], 1)
        output = self.classifier(features)
        return self.loss_fct(output, labels.view(-1))


class CosineSimilarityLoss(nn.Module):
    def __init__(self, model):
        super(CosineSimilarityLoss, self).__init__()
        self.model = model
        self.loss_fct = nn.MSELoss()

    def forward(self, sentence_features, labels):
        embeddings = [self.model(sentence_feature)['sentence_embedding'] for sentence_feature in sentence_features]
        output = torch.cosine_similarity(embeddings[0], embeddings[1])
        return self.loss_fct(output, labels.view(-1))


class EmbeddingSimilarityEvaluator:
    def __call__(self, model, output_path=None, epoch=-1, steps=-1):
        with torch.no_grad():
            a = model({'input_ids': torch.randint(0, 12, (3, 4))})['sentence_embedding']
            b = model({'input_ids': torch.randint(0, 12, (3, 4))})['sentence_embedding']
            return torch.cosine_similarity(a, b).mean().item()


class SentenceTransformer(nn.Sequential):
    def __init__(self, modules=None):
        super().__init__(*modules)
        self.best_score = -9999999

    def smart_batching_collate(self, batch):
        num_texts = len(batch[0][0])
        texts = [[example[0][idx] for example in batch] for idx in range(num_texts)]
        labels = torch.stack([example[1] for example in batch])
        sentence_features = [{'input_ids': torch.stack(t)} for t in texts]
        return sentence_features, labels

    def _get_scheduler(self, optimizer, scheduler, warmup_steps, t_total):
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min((step + 1) / warmup_steps, max(0.0, (t_total - step) / max(1, t_total - warmup_steps))))

    def _eval_during_training(self, evaluator, output_path, save_best_model, epoch, steps, callback):
        if evaluator is not None:
            score = evaluator(self, output_path=output_path, epoch=epoch, steps=steps)
            if score > self.best_score:
                self.best_score = score

    def fit(self,
            train_objectives: Iterable[Tuple[DataLoader, nn.Module]],
            evaluator=None,
            epochs: int = 1,
            steps_per_epoch=None,
            scheduler: str = 'WarmupLinear',
            warmup_steps: int = 2,
            optimizer_class=torch.optim.AdamW,
            optimizer_params=None,
            weight_decay: float = 0.01,
            evaluation_steps: int = 0,
            output_path: str = None,
            save_best_model: bool = True,
            max_grad_norm: float = 1,
            callback=None):
        optimizer_params = optimizer_params or {'lr': 2e-5}
        dataloaders = [dataloader for dataloader, _ in train_objectives]
        for dataloader in dataloaders:
            dataloader.collate_fn = self.smart_batching_collate

        loss_models = [loss for _, loss in train_objectives]

        if steps_per_epoch is None or steps_per_epoch == 0:
            steps_per_epoch = min([len(dataloader) for dataloader in dataloaders])
        num_train_steps = int(steps_per_epoch * epochs)

        # Prepare optimizers
        optimizers = []
        schedulers = []
        for loss_model in loss_models:
            param_optimizer = list(loss_model.named_parameters())
            no_decay = ['bias', 'LayerNorm.bias', 'LayerNorm.weight']
            optimizer_grouped_parameters = [
                {'params': [p for n, p in param_optimizer if not any(nd in n for nd in no_decay)], 'weight_decay': weight_decay},
                {'params': [p for n, p in param_optimizer if any(nd in n for nd in no_decay)], 'weight_decay': 0.0}
            ]
            optimizer = optimizer_class(optimizer_grouped_parameters, **optimizer_params)
            scheduler_obj = self._get_scheduler(optimizer, scheduler=scheduler, warmup_steps=warmup_steps, t_total=num_train_steps)
            optimizers.append(optimizer)
            schedulers.append(scheduler_obj)

        global_step = 0
        data_iterators = [iter(dataloader) for dataloader in dataloaders]
        num_train_objectives = len(train_objectives)

        for epoch in range(epochs):
            training_steps = 0

            for loss_model in loss_models:
                loss_model.zero_grad()
                loss_model.train()

            for _ in range(steps_per_epoch):
                for train_idx in range(num_train_objectives):
                    loss_model = loss_models[train_idx]
                    optimizer = optimizers[train_idx]
                    scheduler = schedulers[train_idx]
                    data_iterator = data_iterators[train_idx]

                    try:
                        data = next(data_iterator)
                    except StopIteration:
                        data_iterator = iter(dataloaders[train_idx])
                        data_iterators[train_idx] = data_iterator
                        data = next(data_iterator)

                    features, labels = data

                    loss_value = loss_model(features, labels)
                    loss_value.backward()
                    torch.nn.utils.clip_grad_norm_(loss_model.parameters(), max_grad_norm)
                    optimizer.step()

                    optimizer.zero_grad()

                    scheduler.step()

                training_steps += 1
                global_step += 1

                if evaluation_steps > 0 and training_steps % evaluation_steps == 0:
                    self._eval_during_training(evaluator, output_path, save_best_model, epoch, training_steps, callback)

                    for loss_model in loss_models:
                        loss_model.zero_grad()
                        loss_model.train()

            self._eval_during_training(evaluator, output_path, save_best_model, epoch, -1, callback)


def pair_examples(n, label_fn):
    return [((torch.randint(0, 12, (4,)), torch.randint(0, 12, (4,))), label_fn()) for _ in range(n)]


if __name__ == '__main__':
    torch.manual_seed(0)
    model = SentenceTransformer(modules=[Transformer(), Pooling()])
    nli = DataLoader(pair_examples(6, lambda: torch.randint(0, 3, (1,))[0]), shuffle=True, batch_size=2)
    sts = DataLoader(pair_examples(6, lambda: torch.rand(())), shuffle=True, batch_size=2)
    train_loss_nli = SoftmaxLoss(model=model, sentence_embedding_dimension=8, num_labels=3)
    train_loss_sts = CosineSimilarityLoss(model=model)
    model.fit(train_objectives=[(nli, train_loss_nli), (sts, train_loss_sts)],
              evaluator=EmbeddingSimilarityEvaluator(), epochs=2, evaluation_steps=2, warmup_steps=2)
    print('best score', model.best_score)
