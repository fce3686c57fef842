"""Whisper's input features in numpy: 16 kHz mono audio -> log-mel spectrogram [n_mels, frames].

As Whisper defines them (openai/whisper audio.py; transformers' WhisperFeatureExtractor computes
the same): the audio padded with zeros or cut to the model's window (30 s, 3000 frames for real
checkpoints; preprocessor_config.json's n_samples), a centered STFT (reflect padding, periodic
Hann window of n_fft = 400, hop 160), the power spectrum without its last frame, a Slaney-style
mel filterbank (slaney area normalization), log10 of at least 1e-10, floored at the maximum
minus 8, then (x + 4) / 4. The numbers of preprocessor_config.json override the defaults.
"""

from __future__ import annotations

import json
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onyxia.errors import ConfigError, InputError


@dataclass(frozen=True)
class FeatureConfig:
    sampling_rate: int = 16000
    n_fft: int = 400
    hop_length: int = 160
    feature_size: int = 80  # mel bins
    n_samples: int = 480000  # the window: 30 s

    @property
    def frames(self) -> int:
        return self.n_samples // self.hop_length

    @classmethod
    def from_folder(cls, folder: Path) -> FeatureConfig:
        path = folder / "preprocessor_config.json"
        if not path.is_file():
            return cls()
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
        values = {k: raw[k] for k in ("sampling_rate", "n_fft", "hop_length", "feature_size", "n_samples")
                  if k in raw}
        for k, v in values.items():
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"{path}: {k} must be a positive integer, got {v!r}")
        return cls(**values)


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above."""
    f = np.asarray(f, np.float64)
    log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log_part, f * 3.0 / 200.0)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * 200.0 / 3.0)


def mel_filters(sampling_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] triangular filters from 0 Hz to Nyquist, area-normalized."""
    fft_freqs = np.linspace(0.0, sampling_rate / 2, n_fft // 2 + 1)
    hz = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sampling_rate / 2), n_mels + 2))
    widths = np.diff(hz)
    ramps = hz[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return weights * (2.0 / (hz[2:] - hz[:-2]))[:, None]


def log_mel(audio: np.ndarray, config: FeatureConfig = FeatureConfig()) -> np.ndarray:
    """float32 [feature_size, frames] features of mono `audio` at config.sampling_rate."""
    x = np.asarray(audio, np.float64).reshape(-1)
    if not np.all(np.isfinite(x)):
        raise InputError("audio holds NaN or infinite samples")
    x = np.pad(x[:config.n_samples], (0, max(config.n_samples - x.size, 0)))
    n_fft, hop = config.n_fft, config.hop_length
    padded = np.pad(x, n_fft // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    count = 1 + (padded.size - n_fft) // hop
    frames = np.lib.stride_tricks.as_strided(padded, (count, n_fft), (padded.strides[0] * hop, padded.strides[0]))
    power = np.abs(np.fft.rfft(frames * window, axis=1)) ** 2  # [count, n_fft // 2 + 1]
    mel = mel_filters(config.sampling_rate, n_fft, config.feature_size) @ power[:-1].T
    spec = np.log10(np.maximum(mel, 1e-10))
    spec = np.maximum(spec, spec.max() - 8.0)
    return ((spec + 4.0) / 4.0).astype(np.float32)


def read_wav(path: str | Path, sampling_rate: int) -> np.ndarray:
    """A PCM WAV file as float samples in [-1, 1], channels averaged, resampled linearly to
    `sampling_rate` when the file has another rate."""
    try:
        with wave.open(str(path), "rb") as f:
            width, channels, rate = f.getsampwidth(), f.getnchannels(), f.getframerate()
            raw = f.readframes(f.getnframes())
    except (OSError, EOFError, wave.Error) as exc:
        raise InputError(f"{path}: not a readable PCM WAV file ({exc})") from None
    kinds = {1: (np.uint8, 128.0, 128.0), 2: (np.int16, 0.0, 32768.0), 4: (np.int32, 0.0, 2147483648.0)}
    if width not in kinds:
        raise InputError(f"{path}: {8 * width}-bit samples are not supported (8, 16 or 32-bit PCM are)")
    dtype, offset, scale = kinds[width]
    samples = (np.frombuffer(raw, dtype).astype(np.float64) - offset) / scale
    samples = samples[:samples.size // channels * channels].reshape(-1, channels).mean(axis=1)
    if rate != sampling_rate and samples.size:
        t = np.arange(int(samples.size * sampling_rate / rate)) * (rate / sampling_rate)
        samples = np.interp(t, np.arange(samples.size), samples)
    return samples.astype(np.float32)


__all__ = ["FeatureConfig", "log_mel", "mel_filters", "read_wav"]
