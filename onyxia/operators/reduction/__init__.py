"""Reductions: the Reduce* family, ArgMax/ArgMin, CumSum/CumProd, the losses (shaders/reduction/)."""
