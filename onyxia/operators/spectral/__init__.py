"""Spectral operators: DFT, STFT and the window functions (shaders/spectral/)."""
