"""Recurrent networks: RNN, GRU and LSTM (shaders/rnn/)."""
