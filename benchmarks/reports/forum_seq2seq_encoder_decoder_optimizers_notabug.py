# source: https://github.com/spro/practical-pytorch/issues/113
# pattern: seq2seq translation: module-level loop calls train(input, target, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion) once per pair; train() clears both optimizers first, sums the per-word NLL through EncoderRNN and AttnDecoderRNN, backward, clips, steps both; asked whether two optimizers are needed: each holds only its own module's parameters, and one joint loss stepped by both, cleared every call, is correct
# case: trap
# expect: clean
# spread: multi
# label: contributions.py: optimizer #0 (encoder_optimizer) and #1 (decoder_optimizer) both apply only the joint loss backward@L127 of their own call; oracle.py: clean
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

SOS_token = 0
EOS_token = 1
MAX_LENGTH = 6
teacher_forcing_ratio = 0.5
clip = 5.0


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, n_layers=1):
        super(EncoderRNN, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.n_layers = n_layers
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers)

    def forward(self, word_inputs, hidden):
        seq_len = len(word_inputs)
        embedded = self.embedding(word_inputs).view(seq_len, 1, -1)
        output, hidden = self.gru(embedded, hidden)
        return output, hidden

    def init_hidden(self):
        return torch.zeros(self.n_layers, 1, self.hidden_size)


class Attn(nn.Module):
    def __init__(self, method, hidden_size):
        super(Attn, self).__init__()
        self.method = method
        self.hidden_size = hidden_size
        if self.method == 'general':
            self.attn = nn.Linear(self.hidden_size, hidden_size)

    def forward(self, hidden, encoder_outputs):
        seq_len = len(encoder_outputs)
        attn_energies = torch.zeros(seq_len)
        for i in range(seq_len):
            attn_energies[i] = self.score(hidden, encoder_outputs[i])
        return F.softmax(attn_energies, dim=0).unsqueeze(0).unsqueeze(0)

    def score(self, hidden, encoder_output):
        if self.method == 'dot':
            return hidden.view(-1).dot(encoder_output.view(-1))
        energy = self.attn(encoder_output)
        return hidden.view(-1).dot(energy.view(-1))


class AttnDecoderRNN(nn.Module):
    def __init__(self, attn_model, hidden_size, output_size, n_layers=1, dropout_p=0.1):
        super(AttnDecoderRNN, self).__init__()
        self.attn_model = attn_model
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers
        self.dropout_p = dropout_p
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.gru = nn.GRU(hidden_size * 2, hidden_size, n_layers, dropout=dropout_p)
        self.out = nn.Linear(hidden_size * 2, output_size)
        if attn_model != 'none':
            self.attn = Attn(attn_model, hidden_size)

    def forward(self, word_input, last_context, last_hidden, encoder_outputs):
        word_embedded = self.embedding(word_input).view(1, 1, -1)
        rnn_input = torch.cat((word_embedded, last_context.unsqueeze(0)), 2)
        rnn_output, hidden = self.gru(rnn_input, last_hidden)
        attn_weights = self.attn(rnn_output.squeeze(0), encoder_outputs)
        context = attn_weights.bmm(encoder_outputs.transpose(0, 1))
        rnn_output = rnn_output.squeeze(0)
        context = context.squeeze(1)
        output = F.log_softmax(self.out(torch.cat((rnn_output, context), 1)), dim=1)
        return output, context, hidden, attn_weights


def variables_from_pair(pair):
    return torch.tensor(pair[0]).view(-1, 1), torch.tensor(pair[1]).view(-1, 1)


def train(input_variable, target_variable, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion,
          max_length=MAX_LENGTH):
    # Zero gradients of both optimizers
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()
    loss = 0

    target_length = target_variable.size()[0]

    encoder_hidden = encoder.init_hidden()
    encoder_outputs, encoder_hidden = encoder(input_variable, encoder_hidden)

    decoder_input = torch.LongTensor([[SOS_token]])
    decoder_context = torch.zeros(1, decoder.hidden_size)
    decoder_hidden = encoder_hidden

    use_teacher_forcing = random.random() < teacher_forcing_ratio
    if use_teacher_forcing:
        for di in range(target_length):
            decoder_output, decoder_context, decoder_hidden, decoder_attention = decoder(
                decoder_input, decoder_context, decoder_hidden, encoder_outputs)
            loss += criterion(decoder_output, target_variable[di])
            decoder_input = target_variable[di]
    else:
        for di in range(target_length):
            decoder_output, decoder_context, decoder_hidden, decoder_attention = decoder(
                decoder_input, decoder_context, decoder_hidden, encoder_outputs)
            loss += criterion(decoder_output, target_variable[di])
            topv, topi = decoder_output.data.topk(1)
            ni = topi[0][0].item()
            decoder_input = torch.LongTensor([[ni]])
            if ni == EOS_token:
                break

    # Backpropagation
    loss.backward()
    torch.nn.utils.clip_grad_norm_(encoder.parameters(), clip)
    torch.nn.utils.clip_grad_norm_(decoder.parameters(), clip)
    encoder_optimizer.step()
    decoder_optimizer.step()

    return loss.item() / target_length


random.seed(0)
torch.manual_seed(0)
n_in_words, n_out_words = 9, 10
pairs = [([random.randrange(2, n_in_words) for _ in range(4)] + [EOS_token],
          [random.randrange(2, n_out_words) for _ in range(3)] + [EOS_token]) for _ in range(5)]

attn_model = 'general'
hidden_size = 8
n_layers = 2
dropout_p = 0.05
encoder = EncoderRNN(n_in_words, hidden_size, n_layers)
decoder = AttnDecoderRNN(attn_model, hidden_size, n_out_words, n_layers, dropout_p=dropout_p)

learning_rate = 0.0001
encoder_optimizer = optim.Adam(encoder.parameters(), lr=learning_rate)
decoder_optimizer = optim.Adam(decoder.parameters(), lr=learning_rate)
criterion = nn.NLLLoss()

n_epochs = 6
print_every = 3
print_loss_total = 0

for epoch in range(1, n_epochs + 1):
    training_pair = variables_from_pair(random.choice(pairs))
    input_variable = training_pair[0]
    target_variable = training_pair[1]

    loss = train(input_variable, target_variable, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion)
    print_loss_total += loss

    if epoch == 0:
        continue
    if epoch % print_every == 0:
        print('%d %.4f' % (epoch, print_loss_total / print_every))
        print_loss_total = 0
