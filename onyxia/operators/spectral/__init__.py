"""Spectral operators: DFT and STFT (shaders/spectral/)."""
