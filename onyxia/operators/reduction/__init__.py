"""Reductions: the Reduce* family, ArgMax/ArgMin, CumSum/CumProd (shaders/reduction/)."""
