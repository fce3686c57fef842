"""Pooling: MaxPool, AveragePool, LpPool, MaxUnpool and the global poolings (shaders/pooling/)."""
